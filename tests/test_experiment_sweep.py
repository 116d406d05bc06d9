"""The sweep use case from the notebook API: the same checks, grid, seeded replicate order and
store as `vmtax sweep`.

The sweep runs at level L0 (agent processes on this machine, no boot) on the guests axis,
with two steps of one and two guests, two replicates and a window of two short samples: the
smallest grid that still has intervals and an order to draw.
"""

from __future__ import annotations

import math

import pytest

from vmtax import api
from vmtax.errors import UsageError
from vmtax.store import Store
from vmtax.sweep.spec import SweepSpec
from vmtax.targets.levels import host_resources

pytestmark = pytest.mark.fast


def test_a_notebook_starts_the_sweep_vmtax_sweep_starts(tmp_path):
    db = f"sqlite:///{tmp_path / 'sweep.db'}"
    cpus, _ = host_resources()
    steps = (1 / cpus, 2 / cpus)  # one guest, then two
    exp = api.sweep(db=db, level="L0", steps=steps, replicates=3, order_seed=11, warmup=0,
                    window=0.5, interval=0.25, events=10, max_prime=5000)  # fmt: skip
    with Store.open(db) as store:
        stored = store.experiment(exp)
        rows = store.sweeps.steps(exp)
    assert stored["status"] == "ok" and stored["suite"] == "sweep" and stored["seed"] == 11
    assert stored["command"] == ["vmtax", "(vmtax.api.sweep)"]
    plan = stored["plan"]
    assert plan["level"] == "L0" and plan["sweep"]["replicates"] == 3
    spec = SweepSpec.from_plan(plan["sweep"])
    assert spec.order_seed == 11 and spec.ratios == pytest.approx(steps)
    # Every unit (step x replicate) stored once, run round by round in the seed's order.
    assert sorted(rows["step_index"]) == [0, 1, 2, 3, 4, 5] and set(rows["status"]) == {"ok"}
    assert list(rows.sort_values("step_index")["guests"]) == [1, 2] * 3
    details = {int(r["step_index"]): r["detail"] for _, r in rows.iterrows()}
    for position, (rep, index) in enumerate(spec.order()):
        d = details[spec.unit(rep, index)]
        assert (d["step"], d["replicate"], d["order"]) == (index, rep, position)
    summary = api.sweep_summary(exp, db=db)
    assert summary.replicates == 3 and summary.order_seed == 11
    assert [len(s.replicate_means) for s in summary.steps] == [3, 3]
    assert all(math.isfinite(m) for s in summary.steps for m in s.replicate_means)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"level": "L2"}, "--level must be L0 or L1"),
        ({"steps": "one,two"}, "--steps must be ratios"),
        ({"steps": (0.5, 40.0)}, "at most 16:1"),
        ({"replicates": 1}, "one replicate per step gives no interval"),
        ({"order_seed": -1}, "--order-seed must be"),
        ({"window": 0.1, "interval": 0.1}, "at least 2 samples"),
        ({"boot_timeout": math.nan}, "--boot-timeout must be"),
    ],
)
def test_bad_sweep_is_refused_before_a_store_exists(tmp_path, options, message):
    db = tmp_path / "never.db"
    with pytest.raises(UsageError, match=message):
        api.sweep(db=f"sqlite:///{db}", **{"level": "L0", **options})
    assert not db.exists()
