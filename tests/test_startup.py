"""A command loads only what it uses: `vmtax --help`, `--version`, `doctor` and every command's
`--help` load none of the heavy libraries (pandas, numpy, scipy, SQLAlchemy, Alembic, pyarrow,
matplotlib, statsmodels), which cost a second or more of every start when they were loaded
for all commands.

Deterministic rather than timed: one child interpreter loads the light CLI, then forks once
per command line; each fork runs the command and reports which heavy modules it loaded.
(bench/startup.py gives the CPU seconds.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib.metadata import version

import pytest
import typer

from vmtax.cli import COMMANDS, full_app
from vmtax.version import __version__

pytestmark = pytest.mark.fast

HEAVY = (
    "pandas",
    "numpy",
    "scipy",
    "sqlalchemy",
    "alembic",
    "pyarrow",
    "matplotlib",
    "statsmodels",
)

#: Run in a fresh interpreter: argument 1 is a JSON list of command lines; prints one JSON
#: object per line, {"argv": [...], "heavy": [...], "code": n}, each from a fork of its own.
PROBE = textwrap.dedent(
    """
    import json, os, sys
    import vmtax.cli
    HEAVY = %r
    for argv in json.loads(sys.argv[1]):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            sys.argv = ["vmtax", *argv]
            code = 0
            try:
                vmtax.cli.main()
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else 1
            heavy = sorted(m for m in HEAVY if m in sys.modules)
            os.write(write, json.dumps({"argv": argv, "heavy": heavy, "code": code}).encode())
            os._exit(0)
        os.close(write)
        chunks = []
        while chunk := os.read(read, 65536):
            chunks.append(chunk)
        os.close(read)
        os.waitpid(pid, 0)
        print(b"".join(chunks).decode(), flush=True)
    """
)


def _paths(cmd, path: tuple[str, ...] = ()):
    yield path
    for name, child in sorted((getattr(cmd, "commands", None) or {}).items()):
        yield from _paths(child, (*path, name))


def loaded_by(command_lines: list[list[str]]) -> list[dict]:
    """What each command line loaded, run in a fresh interpreter that has loaded only the
    CLI's own start."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE % (HEAVY,), json.dumps(command_lines)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def every_help() -> list[list[str]]:
    """`--help` of the app and of every command and subcommand, as a user types them."""
    app = typer.main.get_command(full_app())
    return [[*path, "--help"] for path in _paths(app)]


def test_no_command_loads_a_heavy_library_to_start() -> None:
    lines = [*every_help(), ["--version"], ["doctor"], ["doctor", "--format", "json"]]
    assert len(lines) > 30  # every command and subcommand, not a few
    found = loaded_by(lines)
    assert [r["argv"] for r in found] == lines
    heavy = {" ".join(r["argv"]): r["heavy"] for r in found if r["heavy"]}
    assert not heavy, (
        "these command lines loaded heavy libraries (import them inside the function that "
        f"needs them): {heavy}"
    )
    failed = {" ".join(r["argv"]): r["code"] for r in found if r["code"] not in (0, 1)}
    # doctor exits 1 on a machine that lacks something; --help and --version exit 0.
    assert not failed, f"these command lines did not end as a help or a check does: {failed}"


def test_a_heavy_import_is_seen() -> None:
    """The probe can fail: a command line that loads pandas is reported with it."""
    found = loaded_by([["--version"], ["results", "list", "--db", "sqlite:///:memory:"]])
    assert found[0]["heavy"] == []
    assert "pandas" in found[1]["heavy"] and "sqlalchemy" in found[1]["heavy"]


def test_the_command_table_is_the_commands() -> None:
    """`vmtax --help` lists COMMANDS without loading the modules: the table must name
    exactly the commands the modules register, each with the module that registers it."""
    registered: dict[str, str] = {}
    for module in dict.fromkeys(m for m, _ in COMMANDS.values()):
        own = typer.Typer()
        __import__(f"vmtax.cli.{module}", fromlist=["register"]).register(own)
        for name in typer.main.get_group(own).commands:
            registered[name] = module
    assert registered == {name: module for name, (module, _) in COMMANDS.items()}
    full = typer.main.get_command(full_app())
    assert sorted(full.commands) == sorted(COMMANDS)


def test_the_command_lines_fit_the_help_box() -> None:
    # `vmtax --help` draws the commands in an 80-column box: a line of at most 64 characters
    # beside the longest name keeps each command on one row.
    long = {name: len(line) for name, (_, line) in COMMANDS.items() if len(line) > 64}
    assert not long, long
    assert all(line.endswith(".") for _, line in COMMANDS.values())


def test_version_is_the_installed_one(cli) -> None:
    assert version("vmtax") == __version__
    res = cli("--version")
    assert (res.returncode, res.stdout) == (0, f"vmtax {__version__}\n")
