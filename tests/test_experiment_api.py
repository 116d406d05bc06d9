"""The run use case from the notebook API: the same validation, plan and store as `vmtax run`."""

from __future__ import annotations

import pytest

import vmtax
from vmtax.errors import UsageError


@pytest.mark.slow
def test_a_notebook_starts_the_same_experiment_vmtax_run_starts(sqlite_url):
    exp = vmtax.run(db=sqlite_url, probes=["cpuid", "syscall"], runs=2, seed=7)
    res = vmtax.open(sqlite_url)
    runs = res.runs(f"exp={exp}")
    res.close()
    assert sorted(runs["probe"].unique()) == ["cpuid", "syscall"]
    assert len(runs) == 4 and set(runs["status"]) == {"ok"}
    assert res.store.experiment(exp)["seed"] == 7


@pytest.mark.fast
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"runs": 0}, "--runs must be in 1..10000"),
        ({"seed": 2**64}, "--seed must be in"),
        ({"levels": "L0,L9"}, "--levels must be levels like L0,L1,L2"),
        ({"levels": "L0,L1", "boots": 0}, "--boots must be in 1..1000"),
        ({"runs": 3, "precision": "2%"}, "not both"),
    ],
)
def test_bad_input_is_refused_before_a_store_exists(tmp_path, options, message):
    db = tmp_path / "never.db"
    with pytest.raises(UsageError, match=message):
        vmtax.run(db=f"sqlite:///{db}", **options)
    assert not db.exists()
