"""The sample Grafana dashboard (docs/grafana/vmtax-dashboard.json) reads the PostgreSQL store
directly: every query in it is run here against a real PostgreSQL store holding two known
experiments, with Grafana's macros expanded as Grafana expands them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vmtax.testing.runs import Config
from vmtax.testing.stored import fingerprint, store_experiment

pytestmark = pytest.mark.slow

DASHBOARD = Path(__file__).resolve().parents[1] / "docs" / "grafana" / "vmtax-dashboard.json"
PROBES = ("cpuid", "syscall")


def expand(sql: str) -> str:
    """Grafana's PostgreSQL macros and the dashboard's variable, as Grafana expands them: a
    time filter over the dashboard's range, a multi-value variable as a quoted list."""
    sql = re.sub(
        r"\$__timeFilter\(([^)]+)\)",
        r"\1 BETWEEN '2000-01-01T00:00:00Z' AND '2100-01-01T00:00:00Z'",
        sql,
    )
    sql = sql.replace("$probe", ", ".join(f"'{p}'" for p in PROBES))
    assert "$" not in sql, f"a macro or variable the test does not expand: {sql}"
    return sql


def queries() -> dict[str, str]:
    doc = json.loads(DASHBOARD.read_text())
    found = {p["title"]: t["rawSql"] for p in doc["panels"] for t in p["targets"]}
    for var in doc["templating"]["list"]:
        found[f"variable {var['name']}"] = var["query"]
    return found


@pytest.fixture
def pg_store(postgres_url: str) -> str:
    """Two experiments: L1 10% slower than L0 on kernel 6.1, then 30% on kernel 6.6."""
    from vmtax.store import Store

    with Store.open(postgres_url) as store:
        for factor, kernel, seed in ((1.10, "6.1.0-26-amd64", 1), (1.30, "6.6.0-1-amd64", 2)):
            store_experiment(
                store,
                [Config("L0"), Config("L1", {"accel": "kvm"}, factor)],
                probes=PROBES,
                runs=4,
                boots=2,
                seed=seed,
                fingerprint=lambda cfg, k=kernel: fingerprint(
                    kernel=k, hypervisor="KVM" if cfg.level != "L0" else None
                ),
            )
    return postgres_url


def test_every_query_of_the_dashboard_returns_rows(pg_store: str):
    import psycopg

    found = queries()
    assert len(found) == 5
    results = {}
    with psycopg.connect(pg_store) as conn:
        for title, sql in found.items():
            rows = conn.execute(expand(sql)).fetchall()
            assert rows, f"{title}: no rows"
            results[title] = rows
    assert sorted(r[0] for r in results["variable probe"]) == list(PROBES)
    over_time = results["Overhead against L0, per experiment"]
    assert len(over_time) == 4  # 2 experiments x 2 probes, one L1 each
    ratios = [value for _, _, value in over_time]
    assert ratios[:2] == pytest.approx([1.10, 1.10], rel=0.03)
    assert ratios[2:] == pytest.approx([1.30, 1.30], rel=0.03)
    latest = results["Latest experiment: overhead against L0"]
    assert [(r[0], r[1], r[3]) for r in latest] == [(2, "cpuid", 8), (2, "syscall", 8)]
    assert [float(r[4]) for r in latest] == pytest.approx([1.30, 1.30], rel=0.03)
    kernels = {(r[0], r[4]): (r[5], r[6]) for r in results["Experiments and what they ran on"]}
    assert kernels[(1, "L1 accel=kvm")] == ("6.1.0-26-amd64", "KVM")
    assert kernels[(2, "L0")] == ("6.6.0-1-amd64", None)
    assert len(results["Run means by probe and configuration"]) == 8
