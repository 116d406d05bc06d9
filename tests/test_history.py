"""`vmtax history` on stores made here: a known step where the kernel changed, every format,
a history too short for a step, the HTML view's escaping, and bad input."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from vmtax.testing.runs import Config
from vmtax.testing.stored import fingerprint, store_experiment

pytestmark = pytest.mark.fast

#: Experiments 1-5 on kernel 6.1 with a 10% tax, 6-10 on kernel 6.6 with a 25% tax.
STEP_AFTER = 6


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    from vmtax.store import Store

    url = f"sqlite:///{tmp_path_factory.mktemp('hist') / 'v.db'}"
    with Store.open(url) as store:
        for i in range(1, 11):
            kernel, factor = ("6.1.0", 1.10) if i < STEP_AFTER else ("6.6.0", 1.25)
            store_experiment(
                store,
                [Config("L0"), Config("L1", {"accel": "kvm", "note": "<b>x</b>"}, factor)],
                probes=("cpuid", "syscall"),
                runs=3,
                boots=3,
                boot_sigma=0.02,
                seed=i,
                fingerprint=lambda c, k=kernel: fingerprint(
                    kernel=k, hypervisor="KVM" if c.level != "L0" else None
                ),
            )
    return url


def test_the_step_is_found_where_the_kernel_changed(cli, db):
    r = cli("history", "level=L1", "--db", db, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "vmtax.history/1" and doc["baseline"] == "level=L0"
    assert len(doc["points"]) == 20
    cpuid = [p for p in doc["points"] if p["probe"] == "cpuid"]
    assert [p["experiment"] for p in cpuid] == list(range(1, 11))
    for p in cpuid:
        assert p["ci_low"] < p["overhead"] < p["ci_high"] and p["boots"] == 3
        expect = ["L1 kernel 6.1.0 → 6.6.0", "L0 kernel 6.1.0 → 6.6.0"]
        assert p["changes"] == (expect if p["experiment"] == STEP_AFTER else [])
    found = [s for s in doc["steps"] if s["found"]]
    assert {(s["probe"], s["before"], s["after"]) for s in found} == {
        ("cpuid", STEP_AFTER - 1, STEP_AFTER),
        ("syscall", STEP_AFTER - 1, STEP_AFTER),
    }
    for s in found:
        assert s["ratio"] == pytest.approx(1.25 / 1.10, rel=0.05)
        assert s["p_adjusted"] < 0.05 and "L1 kernel 6.1.0 → 6.6.0" in s["changes"]


def test_the_runs_medians_give_the_same_step(cli, db):
    """--statistic median lays out each run's median: the step is where the kernel changed,
    and the overheads are the planted taxes (the iterations are lognormal about them)."""
    r = cli("history", "level=L1", "--db", db, "--format", "json", "--statistic", "median")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    cpuid = [p for p in doc["points"] if p["probe"] == "cpuid"]
    before = [p["overhead"] for p in cpuid if p["experiment"] < STEP_AFTER]
    after = [p["overhead"] for p in cpuid if p["experiment"] >= STEP_AFTER]
    # boots of 2% sd, three a side: an experiment's overhead within 8% of the planted tax
    assert len(before) == len(after) == 5
    assert max(abs(x / 1.10 - 1) for x in before) < 0.08, before
    assert max(abs(x / 1.25 - 1) for x in after) < 0.08, after
    found = {(s["probe"], s["before"], s["after"]) for s in doc["steps"] if s["found"]}
    assert ("cpuid", STEP_AFTER - 1, STEP_AFTER) in found, doc["steps"]


def test_table_and_csv(cli, db):
    r = cli("history", "level=L1", "probe=cpuid", "--db", db)
    assert r.returncode == 0, r.stderr
    assert "step ×1.1" in r.stdout
    line = next(x for x in r.stdout.splitlines() if x.startswith("cpuid: between experiments 5"))
    assert "changed there: L1 kernel 6.1.0 → 6.6.0, L0 kernel 6.1.0 → 6.6.0" in line
    r = cli("history", "level=L1", "--db", db, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    marked = [(x["probe"], x["experiment"]) for x in rows if x["step_ratio"]]
    assert marked == [("cpuid", str(STEP_AFTER)), ("syscall", str(STEP_AFTER))]


def test_too_few_experiments_for_a_step_says_so(cli, db):
    r = cli("history", "exp=1", "exp=2", "exp=3", "--db", db, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["steps"] == [] and len(doc["points"]) == 6
    assert doc["notes"] == [
        "probe cpuid: 3 experiments; a step needs at least 4 (2 on each side): no step tested",
        "probe syscall: 3 experiments; a step needs at least 4 (2 on each side): no step tested",
    ]
    assert "probe cpuid: 3 experiments; a step needs at least 4" in r.stderr


def test_html_escapes_labels(cli, db, tmp_path):
    out = tmp_path / "h.html"
    r = cli("history", "level=L1", "--db", db, "--format", "html", "-o", str(out))
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert page.count("<svg") == 2  # one chart per probe


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--format", "html"], "--format html needs -o FILE"),
        (["--format", "yaml"], "--format must be one of table, json, csv, html"),
        (["--min-size", "1"], "--min-size must be in 2..1000"),
        (["--statistic", "mode"], "--statistic must be mean or median, got 'mode'"),
        (["--baseline", "level"], "level"),
    ],
)
def test_bad_input(cli, db, args, says):
    r = cli("history", "level=L1", "--db", db, *args)
    assert r.returncode == 2 and says in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_a_selector_matching_two_configurations_is_refused(cli, db):
    r = cli("history", "exp=1", "--baseline", "level=L0,probe=cpuid", "--db", db)
    assert r.returncode == 2, r.stderr
    assert "the selectors match 2 configurations for probe syscall in experiment 1" in r.stderr


def test_qemu_and_microcode_changes_are_named_once_both_sides_record_them():
    from vmtax.contract import Fingerprint
    from vmtax.history.changes import changed

    env = json.loads((Path(__file__).parent / "vectors" / "env.json").read_text())
    old = Fingerprint.model_validate(env).model_dump(mode="json", by_alias=True)
    new = json.loads(json.dumps(old))
    new["cpu"]["microcode"] = "0xf0"
    new["qemu"] = {"version": "7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"}
    # A fingerprint from before the fields, then one with them: nothing changed that anyone
    # knows of (the agent's version and kernel are the same).
    assert changed(old, new, "L1") == []
    newer = json.loads(json.dumps(new))
    newer["cpu"]["microcode"] = "0xf1"
    newer["qemu"]["version"] = "8.2.2 (Debian 1:8.2.2+ds-0ubuntu1.4)"
    assert changed(new, newer, "L1") == [
        "L1 QEMU 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3) → 8.2.2 (Debian 1:8.2.2+ds-0ubuntu1.4)",
        "L1 microcode 0xf0 → 0xf1",
    ]
    newer["clocksource"] = None  # the older fields: a missing side is still a change
    assert changed(new, newer, "L1")[-1] == "L1 clocksource kvm-clock → (none)"
