"""The README's shell blocks are the newcomer's first hour: they are run here, in order, as
written, twice on one store (the worked example with --runs 2, so it takes minutes, not
tens of minutes). The lines that install, test or need other machines are listed with why.

The fast test checks that every line is either run or listed, and that every option a
README line gives to vmtax exists; the other runs them, in order, twice on one store (the
second time measuring less, see as_run).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
VMTAX = [sys.executable, "-c", "from vmtax.entry import main; main()"]

#: Commands of the README that this test does not run, by their first words, and why.
NOT_RUN = {
    ("pip", "install"): "installs the package (the test runs the installed one)",
    ("./scripts/test",): "is the test suite itself",
    ("cargo", "build"): "builds the agent (scripts/test builds the one the tests use)",
    ("vmtax", "run", "--target"): "needs SSH hosts (tests/test_ssh_target.py has real ones)",
    ("vmtax", "run", "--targets"): "needs a fleet file of hosts (tests/test_fleet*.py)",
    ("vmtax", "run", "--inventory"): "needs an inventory of hosts (tests/test_fleet*.py)",
}


def commands() -> list[list[str]]:
    """Every command of the README's ```sh blocks, in order (``a && b`` is two commands)."""
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", README.read_text(), re.S | re.M):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            while words:
                cut = words.index("&&") if "&&" in words else len(words)
                out.append(words[:cut])
                words = words[cut + 1 :]
    return out


def skipped(cmd: list[str]) -> str | None:
    for prefix, why in NOT_RUN.items():
        if tuple(cmd[: len(prefix)]) == prefix:
            return why
    return None


def as_run(cmd: list[str], attempt: int = 1) -> list[str]:
    """The command as the test runs it: `vmtax run` with --runs 2 (two runs per probe and
    level are enough to compare; the README's defaults measure for minutes), or 3 for the
    first `--levels` run, so that each of its three boots has a run.

    The second pass is about the store, not the measuring, which the first pass did as
    written: every command meets a store that already holds experiments (a second
    experiment, `exp=latest` and its baseline among two L0s, the next report's name, the
    files the first pass wrote). So there its `vmtax run`s measure one probe (cpuid, unless
    the line names its own) in one boot of each guest level, a guest of one vCPU
    (seed-a-reserved): the same commands, without the three L1 boots and 39 figures that
    made the first pass's `vmtax run --levels L0,L1` more than half of its CPU time (on
    2 cores at a load average of 5, the first pass took 97 CPU seconds, 54 of them that
    run, and the second 41).

    `vmtax run --level L1 --label ...` says which level this machine is and labels its
    runs: what it would measure is the first `vmtax run`'s quick suite at L0 again, so it
    measures one probe in both passes (8.7 CPU seconds with the quick suite, 5.0 with
    cpuid)."""
    if cmd[:2] == ["vmtax", "run"] and "--runs" not in cmd:
        # Three runs where there are guest boots: one in each of the three boots it makes.
        cmd = [*cmd, "--runs", "3" if "--levels" in cmd and attempt == 1 else "2"]
    one_probe = attempt > 1 or "--level" in cmd
    if cmd[:2] == ["vmtax", "run"] and "--probe" not in cmd and one_probe:
        cmd = [*cmd, "--probe", "cpuid"]
    if attempt > 1 and cmd[:2] == ["vmtax", "run"] and "--levels" in cmd:
        cmd = [*cmd, "--boots", "1", "--preset", "seed-a-reserved"]
    return [*VMTAX, *cmd[1:]] if cmd[0] == "vmtax" else cmd


def writes_run_report(cmd: list[str], attempt: int) -> bool:
    """Whether the test lets this `vmtax run` write its report (VMTAX_RUN_REPORT unset).
    Every one does but the first pass's `vmtax run --levels L0,L1`: its experiment's report
    is the README's next-but-one line, `vmtax report exp=latest --baseline level=L0 -o
    report.html` (the same ``write_report`` on the same 12 probes and 3 boots), and the
    report a `--levels` run writes itself is the second pass's. The 12-probe report takes
    about 11 CPU seconds; made twice, it was a fifth of the first pass."""
    return not (attempt == 1 and cmd[:2] == ["vmtax", "run"] and "--levels" in cmd)


@pytest.mark.fast
def test_every_readme_command_is_run_or_listed_and_its_options_exist(cli):
    cmds = commands()
    assert any(c[:3] == ["vmtax", "compare", "exp=latest"] for c in cmds)
    helps: dict[tuple[str, ...], str] = {}
    for cmd in cmds:
        if skipped(cmd):
            continue
        assert cmd[0] == "vmtax", f"a README command the test cannot run: {shlex.join(cmd)}"
        sub = tuple(w for w in cmd[1:3] if not w.startswith("-") and "=" not in w)
        sub = sub if sub[:1] in (("results",), ("refs",), ("db",)) else sub[:1]
        if sub not in helps:
            res = cli(*sub, "--help")
            assert res.returncode == 0, (sub, res.stderr)
            helps[sub] = res.stdout
        for word in cmd:
            if word.startswith("--"):
                assert word.split("=")[0] in helps[sub], (shlex.join(cmd), word)


@pytest.mark.fast
def test_the_worked_examples_counts_are_the_tools():
    """The worked example's counts are what vmtax does, not what it once did: the quick
    suite's 12 probes and 45 s budget, three boots of a guest level, and the runs a side at
    which 12 comparisons can reach p < 0.05 after Holm."""
    from vmtax.experiment.request import DEFAULT_BOOTS
    from vmtax.plan.suite import load_suite
    from vmtax.stats.significance import significance_floor

    text = " ".join(README.read_text().split())
    suite, _ = load_suite("quick")
    assert len(suite.probes) == 12 and "geomean (12 probes)" in text
    assert suite.budget == 45.0 and "until the 45 s budget is spent" in text
    assert DEFAULT_BOOTS == 3 and "measures three boots of L1" in text
    floor = significance_floor(12)
    assert floor == 6 and f"at least the {floor} a side at which 12 comparisons" in text
    assert "3 boots of L1, one of L0, at least 6 runs a side" in text


@pytest.mark.slow
def test_readme_commands_run_in_order_twice_on_one_store(tmp_path):
    env = {**os.environ, "VMTAX_DB": str(tmp_path / "readme.db")}
    env.pop("VMTAX_RUN_REPORT", None)  # as a user has it: vmtax run writes its report
    spent: list[str] = []  # each command's wall and CPU seconds, printed at the end
    for attempt in (1, 2):
        for cmd in commands():
            if skipped(cmd):
                continue
            here = env if writes_run_report(cmd, attempt) else {**env, "VMTAX_RUN_REPORT": "none"}
            wall, cpu = time.monotonic(), _children_cpu()
            res = subprocess.run(as_run(cmd, attempt), cwd=tmp_path, env=here, capture_output=True,
                                 text=True, timeout=1800)  # fmt: skip
            spent.append(f"{attempt} {time.monotonic() - wall:6.1f} s wall "
                         f"{_children_cpu() - cpu:6.1f} s CPU  {shlex.join(cmd)}")  # fmt: skip
            assert res.returncode == 0, (attempt, shlex.join(cmd), res.stderr[-2000:])
            if cmd[:2] == ["vmtax", "run"] and writes_run_report(cmd, attempt):
                assert re.search(
                    r"^report: vmtax-report-[\w.]+-[0-9a-f]{6}-\d+\.html", res.stdout, re.M
                ), res.stdout
            if attempt == 1 and cmd[:3] == ["vmtax", "compare", "exp=latest"]:
                _holds_the_worked_examples_counts(tmp_path, env)
    assert (tmp_path / "report.html").stat().st_size > 0
    load = os.getloadavg()
    print(f"README, two passes (load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}):",
          *spent, sep="\n", file=sys.stderr)  # fmt: skip


def _children_cpu() -> float:
    """CPU seconds of the commands this process has waited for, their children included
    (QEMU's, under the agent's watchdog, once the watchdog is reaped)."""
    t = os.times()
    return t.children_user + t.children_system


def _holds_the_worked_examples_counts(cwd: Path, env: dict) -> None:
    """The worked example's table, as the README states it: 12 probes, L1 in 3 boots and L0
    in one, and a geomean row."""
    res = subprocess.run(
        [*VMTAX, "compare", "exp=latest", "--baseline", "level=L0", "--format", "json"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    import json

    rows = json.loads(res.stdout)["rows"]
    probes = {r["probe"] for r in rows if r["probe"] != "geomean"}
    assert len(probes) == 12, probes
    boots = {(r["level"], r["boots"]) for r in rows if r["probe"] != "geomean"}
    assert boots == {("L0", 1), ("L1", 3)}, boots
    assert any(r["probe"] == "geomean" for r in rows)
