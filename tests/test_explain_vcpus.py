"""`vmtax explain` split by vCPU, on a synthetic store whose costs are known per vCPU: a
pinned client on vCPU 0 and its server on vCPU 1 carry the measured requests' exits, and
vCPU 2 carries exits that are on no request's path (another thread's timer). The fraction on
the path is the path's cost over the overhead; the whole fraction counts vCPU 2 as well."""

from __future__ import annotations

import json

import numpy as np
import pytest

import vmtax.hostprof.store as hp
from vmtax.experiment.explain import explain_overhead

pytestmark = pytest.mark.fast

ITERATIONS = 1_000
ROUND_TRIP = 4_000.0  # ns
CPUID, MSR, HLT = 0x72, 0x7C, 0x78
#: vCPU -> reason -> (exits per op, handling ns per exit); HLT's time is waiting.
HTTP = {
    0: {MSR: (2, 5_000.0), HLT: (1, 300_000.0)},
    1: {MSR: (3, 5_000.0), HLT: (1, 300_000.0)},
    2: {MSR: (4, 5_000.0)},
}
BASE = {"cpuid": 200.0, "http": 100_000.0}
RESIDUAL = 10_000.0  # ns per op that no exit carries
STARTUP = 40  # cpuid exits of the start-up, all on vCPU 0


def _cost(reasons: dict[int, tuple[float, float]]) -> float:
    """Per op: every exit's round trip plus its handling (a halt none)."""
    return sum(n * (ROUND_TRIP + (0.0 if c == HLT else h)) for c, (n, h) in reasons.items())


PATH_NS = _cost(HTTP[0]) + _cost(HTTP[1])
OFF_PATH_NS = _cost(HTTP[2])
OVERHEAD = PATH_NS + OFF_PATH_NS + RESIDUAL


def _profile(split: dict[int, dict[int, tuple[float, float]]], startup: int, keyed: bool) -> dict:
    by_vcpu, total = {}, {}
    for vcpu, reasons in split.items():
        rows = []
        for code, (per_op, handling) in reasons.items():
            count = int(per_op * ITERATIONS) + (startup if code == CPUID and vcpu == 0 else 0)
            row = {"code": code, "count": count, "time_ns": int(count * handling), "timed": count}
            rows.append(row)
            t = total.setdefault(code, {"code": code, "count": 0, "time_ns": 0, "timed": 0})
            for k in ("count", "time_ns", "timed"):
                t[k] += row[k]
        by_vcpu[str(vcpu)] = rows
    profile = {"isa": "svm", "complete": True, "dropped": 0, "reasons": list(total.values())}
    profile["startup"] = {str(CPUID): startup} if startup else {}
    if keyed:
        profile["by_vcpu"] = by_vcpu
    return profile


def _populate(store, rng, *, keyed: bool = True, pinned: bool = True, runs: int = 6) -> None:
    exp = store.create_experiment(
        command=["vmtax", "run"], suite="t", seed=0, plan={}, vmtax_version="t", agent_version="t",
    )  # fmt: skip
    for level in ("L1", "L2"):
        cfg = store.configuration(
            experiment_id=exp, level=level, labels={}, fingerprint={"cpu": {"tsc_hz": 1e9}},
            target="synthetic", provenance={},
        )  # fmt: skip
        for plan, probe in enumerate(("cpuid", "http")):
            truth = BASE[probe]
            if level == "L2":
                truth += 30_000.0 + ROUND_TRIP if probe == "cpuid" else OVERHEAD
            for i in range(runs):
                mean = truth * rng.lognormal(0.0, 0.003)
                extra = {"client_cpu": 0, "server_cpu": 1} if pinned and probe == "http" else {}
                run = store.add_run(
                    experiment_id=exp, configuration_id=cfg, probe=probe, plan_index=plan,
                    run_index=i, header={"unit": "ns", "better": "lower"},
                    summary={"n": ITERATIONS, "mean": mean, "extra": extra},
                    values=np.full(ITERATIONS, mean), warmup_values=np.zeros(0), status="ok",
                )  # fmt: skip
                if level == "L2":
                    split = {0: {CPUID: (1, 30_000.0)}} if probe == "cpuid" else HTTP
                    startup = STARTUP if probe == "cpuid" else 0
                    hp.save_profile(store, int(run), "L1", _profile(split, startup, keyed))
    store.finish_experiment(exp, "ok")


def test_the_path_fraction_counts_the_pinned_vcpus_only(store, sqlite_url):
    _populate(store, np.random.default_rng(1))
    found = explain_overhead(["exp=latest"], db=sqlite_url)
    http = found.rows[found.rows["probe"] == "http"].iloc[0]
    assert http["path_vcpus"] == "0,1"
    # The whole fraction counts vCPU 2's exits too; the path's leaves them out.
    assert http["explained"] == pytest.approx((PATH_NS + OFF_PATH_NS) / OVERHEAD, abs=0.02)
    truth = PATH_NS / OVERHEAD
    assert http["path_explained"] == pytest.approx(truth, abs=0.02)
    assert http["path_explained_low"] < truth < http["path_explained_high"]
    assert http["path_explained_high"] - http["path_explained_low"] < 0.1
    split = found.vcpus[found.vcpus["probe"] == "http"].set_index("vcpu")
    assert list(split["role"]) == ["client", "server", ""]
    for vcpu, reasons in HTTP.items():
        assert split.loc[vcpu, "exits_per_op"] == pytest.approx(sum(n for n, _ in reasons.values()))
        assert split.loc[vcpu, "explained_ns"] == pytest.approx(_cost(reasons), rel=0.03)
    # The vCPUs' costs add up to the whole decomposition's.
    assert split["explained_ns"].sum() == pytest.approx(OVERHEAD - RESIDUAL, rel=0.03)


def test_the_cli_shows_the_split_and_says_where_there_is_none(cli, store, sqlite_url):
    _populate(store, np.random.default_rng(2))
    text = cli("explain", "--db", sqlite_url).stdout
    assert "by the vCPU that made the exits" in text
    line = next(x for x in text.splitlines() if "on the measured path (vCPUs 0,1" in x)
    assert "95% CI" in line
    rows = json.loads(cli("explain", "--db", sqlite_url, "--format", "json").stdout)
    residual = next(r for r in rows if r["probe"] == "http" and r["group"] == "residual")
    assert [v["vcpu"] for v in residual["by_vcpu"]] == [0, 1, 2]
    assert residual["path_explained"] == pytest.approx(PATH_NS / OVERHEAD, abs=0.02)


@pytest.mark.parametrize("keyed,pinned", [(False, True), (True, False)])
def test_without_a_split_or_a_recorded_path_no_path_fraction(store, sqlite_url, keyed, pinned):
    _populate(store, np.random.default_rng(3), keyed=keyed, pinned=pinned)
    found = explain_overhead(["exp=latest"], db=sqlite_url)
    http = found.rows[found.rows["probe"] == "http"].iloc[0]
    assert http["path_vcpus"] == "" and np.isnan(http["path_explained"])
    assert http["explained"] == pytest.approx((PATH_NS + OFF_PATH_NS) / OVERHEAD, abs=0.02)
    if keyed:
        assert set(found.vcpus["role"]) == {"not recorded"}
    else:
        assert found.vcpus.empty  # profiles recorded before the vCPU key have no split
    from vmtax.report.explain_format import summary

    line = next(x for x in summary(found.rows) if "on the measured path" in x)
    assert "not split" in line
