"""`vmtax run --boot-cost S`: what one boot of a guest costs, for Kalibera and Jones' runs per
boot in adaptive sampling (stored with the plan, so a resume keeps it) and in the report the
run writes, with compare's limits: a value that is not a positive number of seconds, at most
the longest timeout, is refused in one line with exit 2 before anything runs."""

from __future__ import annotations

import re

import pytest

from vmtax.experiment import report
from vmtax.experiment.request import RunRequest
from vmtax.stats.compare_options import BOOT_COST_S
from vmtax.store import Store

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("value", ["0", "-1", "nan", "1e12", "abc"])
def test_a_bad_boot_cost_is_one_line_and_exit_2(cli, tmp_path, value):
    db = f"sqlite:///{tmp_path / 'v.db'}"
    r = cli("run", "--levels", "L0,L1", "--boot-cost", value, "--db", db)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("vmtax: error: ") and "boot-cost" in lines[0], lines
    assert not (tmp_path / "v.db").exists()


def test_a_boot_cost_without_a_guest_level_is_refused_as_boots_is(cli, tmp_path):
    """Like --boots: this machine and SSH hosts have one boot, so a boot's cost means nothing
    there; it used to be accepted and the whole run measured."""
    db = f"sqlite:///{tmp_path / 'v.db'}"
    for extra in ([], ["--target", "user@host"]):
        r = cli("run", "--boot-cost", "90", *extra, "--db", db)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr
        assert lines[0] == (
            "vmtax: error: --boot-cost applies to guest levels (this machine and SSH hosts "
            "have one boot): add --levels L0,L1"
        ), lines
        assert not (tmp_path / "v.db").exists()


def test_a_given_boot_cost_is_the_requests_and_the_default_otherwise():
    assert RunRequest(levels="L0,L1", boot_cost_s=90.0).boot_cost == 90.0
    RunRequest(levels="L0,L1", boot_cost_s=90.0).validate()
    assert RunRequest().boot_cost == BOOT_COST_S


@pytest.mark.parametrize(("given", "expected"), [([], BOOT_COST_S)])
def test_the_boot_cost_reaches_sampling_and_the_runs_report(
    cli, tmp_path, monkeypatch, given, expected
):
    seen: list[float] = []

    def write_run_report(store, exp_id, out, progress=None, options=None):
        seen.append(options.boot_cost_s)
        raise report.VmtaxError("not this test's")

    monkeypatch.setattr(report, "write_run_report", write_run_report)
    monkeypatch.setenv("VMTAX_RUN_REPORT", str(tmp_path / "r-{id}.html"))
    db = f"sqlite:///{tmp_path / 'v.db'}"
    args = ("--probe", "syscall", "--precision", "50%", "--budget", "2s", "--min-runs", "5")
    r = cli("run", *args, *given, "--db", db)
    assert r.returncode == 0, r.stderr
    assert seen == [expected]
    exp = int(re.findall(r"^experiment (\d+)$", r.stdout, re.M)[-1])
    with Store.open(db) as store:
        assert store.experiment(exp)["plan"]["sampling"]["boot_cost_s"] == expected
