"""Credentials never leave vmtax: a password in the database URL and the passphrase of an
encrypted SSH key are planted, a real run goes through a real sshd into a real PostgreSQL
server, and every output is searched for them: stdout and stderr of every command (the run,
results, export, report, compare, env, db info, and failing runs), every file written, and
every row of the database."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import psycopg
import pytest

from conftest import PG_PASSWORD
from test_ssh_support import Sshd, needs_sshd
from vmtax.targets.base import find_agent

pytestmark = pytest.mark.slow

REPORTS = ("r.md", "r.html")
SUITE = """
name = "secrets"
[defaults]
runs = 3
iterations = 2000
duration = 0.05
warmup = 10
timeout = 60
[[probes]]
probe = "cpuid"
"""


@pytest.fixture
def vmtax_here(capfd, monkeypatch):
    """The `vmtax` entry point in this process, its output read at file descriptors 1 and 2
    (so a child's or a C library's write is searched too), with ``env`` as its environment:
    a start-up per command cost most of this test."""
    from vmtax.cli import main

    def call(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
        for name in set(os.environ) - set(env):
            monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(sys, "argv", ["vmtax", *args])
        capfd.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            main()
        out, err = capfd.readouterr()
        code = exit_info.value.code
        return subprocess.CompletedProcess(list(args), code if isinstance(code, int) else 1,
                                           out, err)  # fmt: skip

    return call


def _database_text(url: str) -> str:
    """Every row of every table of the store, as text."""
    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]  # fmt: skip
        out = []
        for t in tables:
            for row in conn.execute(f'SELECT * FROM "{t}"'):
                out.append(repr(row))
    return "\n".join(out)


def test_no_password_or_passphrase_in_any_output(postgres_url, tmp_path, vmtax_here, monkeypatch):
    needs_sshd()
    passphrase = f"ssh-phrase-{secrets.token_hex(6)}"
    password = PG_PASSWORD
    assert f":{password}@" in postgres_url
    root = tmp_path / "sshd"
    root.mkdir()
    # PEM: asyncssh unlocks it with no extra package (OpenSSH-format needs bcrypt).
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-m", "PEM", "-N", passphrase, "-f",
                    str(root / "client_ed25519")], check=True)  # fmt: skip
    server = Sshd(root)  # keeps the encrypted client key it finds
    server.start()
    server.trust()
    work = tmp_path / "work"
    work.mkdir()
    hosts = work / "hosts.toml"
    hosts.write_text(
        f'[[hosts]]\nurl = "{server.url}"\nname = "locked"\nidentity = "{server.client_key}"\n'
        f'known_hosts = "{server.known_hosts}"\nremote_dir = "{server.remote_dir}"\n'
        'passphrase_env = "BENCH_KEY_PASSPHRASE"\npython = "/usr/bin/python3"\n'
    )
    (work / "suite.toml").write_text(SUITE)
    monkeypatch.chdir(work)
    env = {k: v for k, v in os.environ.items() if k != "VMTAX_DB"}
    env.update({"VMTAX_PROBE": str(find_agent()), "BENCH_KEY_PASSPHRASE": passphrase})
    db = postgres_url
    outputs: list[subprocess.CompletedProcess] = []
    try:
        run = vmtax_here("run", "--targets", str(hosts), "--suite", "suite.toml", "--db", db,
                         env=env)  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
        local = vmtax_here("run", "--suite", "suite.toml", "--db", db, "--label", "where=local",
                           env=env)  # fmt: skip
        assert local.returncode == 0, local.stderr[-2000:]
        outputs += [run, local]
        # Without the passphrase the key cannot be unlocked: one line, no secret.
        no_phrase = {k: v for k, v in env.items() if k != "BENCH_KEY_PASSPHRASE"}
        locked = vmtax_here("run", "--targets", str(hosts), "--suite", "suite.toml", "--db", db,
                            env=no_phrase)  # fmt: skip
        assert locked.returncode == 1 and "cannot unlock identity" in locked.stderr
        outputs.append(locked)
    finally:
        server.stop()
    bad_db = db.replace("@127.0.0.1:", "@127.0.0.1:1").rsplit("/", 1)[0] + "/nowhere"
    for args in (
        ("results", "list", "--db", db),
        ("results", "show", "1", "--db", db),
        ("results", "export", "1", "-o", "runs.csv", "--format", "csv", "--samples",
         "--db", db),
        ("results", "export", "2", "-o", "runs.json", "--format", "json", "--db", db),
        ("report", "exp=1", "exp=2", "--baseline", "where=local", "--db", db, "-o", "r.html"),
        ("report", "exp=1", "exp=2", "--baseline", "where=local", "--db", db, "-o", "r.md"),
        ("compare", "exp=1", "exp=2", "--baseline", "where=local", "--db", db),
        ("env",),
        ("env", "--format", "json"),
        ("db", "info", "--db", db),
        ("db", "info", "--db", bad_db),
        ("run", "--db", bad_db, "--suite", "suite.toml"),
    ):  # fmt: skip
        outputs.append(vmtax_here(*args, env=env))
    assert outputs[-1].returncode != 0 and outputs[-2].returncode != 0
    failed = [(o.args[:2], o.stderr[-300:]) for o in outputs[3:-2] if o.returncode != 0]
    assert failed == []
    texts = {f"{' '.join(map(str, o.args[:3]))} ({stream})": getattr(o, stream)
             for o in outputs for stream in ("stdout", "stderr")}  # fmt: skip
    written = [p for p in work.rglob("*") if p.is_file()]
    assert len(written) >= 5, written  # exports and reports were written
    for p in written:
        texts[str(p.relative_to(work))] = p.read_bytes().decode("utf-8", "replace")
    texts["database"] = _database_text(db.replace("postgresql://", "postgresql://", 1))
    assert "locked" in texts["database"]  # the run through the encrypted key is stored
    for secret in (password, passphrase):
        leaks = {
            where: text[max(0, text.index(secret) - 200) : text.index(secret) + 50]
            for where, text in texts.items()
            if secret in text
        }
        assert leaks == {}, f"{secret!r} found in {leaks}"
    assert "pg-secret" not in texts["database"]


@pytest.mark.parametrize("words", [("cannot", "unlock")])
def test_the_unlock_error_names_the_variable_not_the_value(words, tmp_path):
    """SshTarget's message for an encrypted key without its passphrase (no server needed:
    the key is read before any connection)."""
    from vmtax.targets.base import TargetError
    from vmtax.targets.ssh import SshTarget

    key = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-m", "PEM", "-N", "s3cret-x", "-f",
                    str(key)], check=True)  # fmt: skip
    target = SshTarget("ssh://u@127.0.0.1:1", identity=str(key), passphrase_env="NOPE_UNSET",
                       connect_timeout=2)  # fmt: skip
    with pytest.raises(TargetError) as err:
        target.prepare()
    msg = str(err.value)
    assert all(w in msg for w in words) and "$NOPE_UNSET" in msg and "s3cret-x" not in msg
