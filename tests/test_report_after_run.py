"""The experiment layer writes a run's report: `vmtax.api.run` leaves the file `vmtax run`
leaves, with the same content (its generation time aside)."""

from __future__ import annotations

import re
import warnings

import pytest

from vmtax import api
from vmtax.targets.base import find_agent

GENERATED = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC")


@pytest.fixture
def cli_agent() -> str:
    return str(find_agent())


def _without_time(text: str) -> str:
    return GENERATED.sub("<time>", text)


@pytest.mark.slow
def test_api_run_writes_the_report_vmtax_run_writes(tmp_path, monkeypatch, cli, cli_agent):
    monkeypatch.setenv("VMTAX_PROBE", cli_agent)
    monkeypatch.setenv("VMTAX_RUN_REPORT", str(tmp_path / "r-{id}.html"))
    db = f"sqlite:///{tmp_path / 'lab.db'}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a report that could not be written warns
        exp = api.run(db=db, probes=["cpuid"], runs=2, duration=0.05, seed=3)
    out = tmp_path / f"r-{exp}.html"
    by_api = out.read_text(encoding="utf-8")
    assert "<html" in by_api and f"exp={exp}" in by_api
    out.unlink()
    # The CLI on the same store and experiment: a resume with nothing left to run still
    # writes the experiment's report, through the same code.
    res = cli("run", "--resume", str(exp), "--db", db)
    assert res.returncode == 0, res.stderr
    assert f"report: {out} " in res.stdout
    by_cli = out.read_text(encoding="utf-8")
    assert GENERATED.search(by_cli)
    assert _without_time(by_cli) == _without_time(by_api)


@pytest.mark.fast
def test_api_run_without_a_report_writes_none(tmp_path, monkeypatch, cli_agent):
    monkeypatch.setenv("VMTAX_PROBE", cli_agent)
    monkeypatch.setenv("VMTAX_RUN_REPORT", "none")
    monkeypatch.chdir(tmp_path)
    api.run(db=f"sqlite:///{tmp_path / 'lab.db'}", probes=["cpuid"], runs=1, duration=0.05)
    assert not list(tmp_path.glob("*.html"))
