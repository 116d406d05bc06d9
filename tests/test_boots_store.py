"""The boot each run ran in: stored from the agent's header, read back as the runs' `boot`
column, and, for runs stored before the boot was recorded, one boot per configuration."""

from __future__ import annotations

import numpy as np
import pytest
from alembic import command
from sqlalchemy import create_engine, inspect

from vmtax.store import Store, migrate
from vmtax.store.store import UNRECORDED_BOOT

pytestmark = pytest.mark.fast

HEADER = {"type": "header", "probe": "cpuid", "unit": "tsc_cycles", "better": "lower",
          "throughput_unit": None, "params": {"leaf": 0}}  # fmt: skip
BOOTS = ["6f1c9a52-3d7e-4b8a-9c41-2e5f0d8b7a13", "0b7e2d41-9a3c-4f58-8e16-c2d9a4b7f305"]


def _fill(store: Store) -> tuple[int, int]:
    """Two configurations: L0 in one boot, L1 over two boots (runs 0-1 and 2-3)."""
    exp = store.create_experiment(
        command=["vmtax", "run"], suite="quick", seed=1, plan={"items": []},
        vmtax_version="0.1.0", agent_version="0.1.0",
    )  # fmt: skip
    l0 = store.configuration(experiment_id=exp, level="L0", labels={}, fingerprint={},
                             target="local", provenance={})  # fmt: skip
    l1 = store.configuration(experiment_id=exp, level="L1", labels={"accel": "tcg"},
                             fingerprint={}, target="qemu-L1", provenance={})  # fmt: skip
    values = np.linspace(1.0, 2.0, 8)
    for cfg, boots in ((l0, [BOOTS[0]] * 4), (l1, [BOOTS[1]] * 2 + ["c3", "c3"])):
        for run, boot in enumerate(boots):
            store.add_run(
                experiment_id=exp, configuration_id=cfg, probe="cpuid", plan_index=0,
                run_index=run, header={**HEADER, "boot_id": boot},
                summary={"n": 8, "mean": float(values.mean())}, values=values,
                warmup_values=values[:2], status="ok",
            )  # fmt: skip
    # A header without a boot id (an older agent, or `vmtax import` of its stream).
    store.add_run(
        experiment_id=exp, configuration_id=l1, probe="syscall", plan_index=1, run_index=0,
        header=HEADER, summary={"n": 8}, values=values, warmup_values=values[:2], status="ok",
    )  # fmt: skip
    return l0, l1


def test_runs_carry_the_boot_of_their_header(store):
    l0, l1 = _fill(store)
    runs = store.runs()
    by_cfg = runs.groupby("configuration_id")["boot"]
    assert list(by_cfg.get_group(l0)) == [BOOTS[0]] * 4
    assert list(runs[runs["probe"] == "cpuid"].groupby("configuration_id")["boot"].nunique()) == [
        1, 2,
    ]  # fmt: skip
    assert list(by_cfg.get_group(l1)) == [BOOTS[1]] * 2 + ["c3", "c3", f"{UNRECORDED_BOOT}{l1}"]


def test_old_store_is_upgraded_and_its_runs_are_one_boot_per_configuration(store, sqlite_url):
    l0, l1 = _fill(store)
    store.close()
    # Take the store back to the schema before boots, then let vmtax upgrade it again.
    engine = create_engine(sqlite_url)
    with engine.begin() as connection:
        command.downgrade(migrate._config(connection), "0005")
        assert "boot_id" not in {c["name"] for c in inspect(connection).get_columns("runs")}
    engine.dispose()
    with Store.open(sqlite_url) as upgraded:
        assert upgraded.info()["schema_version"] == migrate.head() == "0007"
        runs = upgraded.runs()
    assert len(runs) == 9
    boots = runs.groupby("configuration_id")["boot"].unique()
    assert [list(boots[l0]), list(boots[l1])] == [
        [f"{UNRECORDED_BOOT}{l0}"], [f"{UNRECORDED_BOOT}{l1}"],
    ]  # fmt: skip
