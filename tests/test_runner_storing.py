"""execution.Storing, where runs and sweeps store what they measured and how their experiment
ended: ok, failed (marked so, or an error) or interrupted (Ctrl-C), whatever executed."""

from __future__ import annotations

import pytest

from vmtax.execution import Storing
from vmtax.store import Store
from vmtax.store.runtimes import RunTimes

pytestmark = pytest.mark.fast


def _experiment(store: Store) -> int:
    return store.create_experiment(command=["vmtax", "sweep"], suite="sweep", seed=0,
                                   plan={"sweep": {}}, vmtax_version="test",
                                   agent_version=None)  # fmt: skip


class _Boom(RuntimeError):
    pass


def _ok(storing: Storing) -> None:
    del storing


def _marked_failed(storing: Storing) -> None:
    storing.status = "failed"


def _error(storing: Storing) -> None:
    raise _Boom("a step broke")


def _ctrl_c(storing: Storing) -> None:
    raise KeyboardInterrupt


def _failed_then_ctrl_c(storing: Storing) -> None:
    storing.status = "failed"
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("body", "raised", "status"),
    [
        (_ok, None, "ok"),
        (_marked_failed, None, "failed"),
        (_error, _Boom, "failed"),
        (_ctrl_c, KeyboardInterrupt, "interrupted"),
        (_failed_then_ctrl_c, KeyboardInterrupt, "failed"),
    ],
)
def test_settling_stores_how_the_execution_ended_then_cleans_up(tmp_path, body, raised, status):
    with Store.open(str(tmp_path / "s.db")) as store:
        exp = _experiment(store)
        storing = Storing(store, exp)
        seen: list[str] = []

        def cleanup() -> None:
            seen.append(store.experiment(exp)["status"])  # stored before the cleanup

        def execute() -> None:
            with storing.settling(cleanup):
                body(storing)

        if raised is None:
            execute()
        else:
            with pytest.raises(raised):
                execute()
        assert store.experiment(exp)["status"] == status
        assert seen == [status]


def test_a_stage_before_the_execution_stores_a_status_only_when_it_fails(tmp_path):
    with Store.open(str(tmp_path / "s.db")) as store:
        exp = _experiment(store)
        with Storing(store, exp).settling(only_if_stopped=True):
            pass
        assert store.experiment(exp)["status"] == "running"
        with pytest.raises(_Boom), Storing(store, exp).settling(only_if_stopped=True):
            _error(Storing(store, exp))
        assert store.experiment(exp)["status"] == "failed"


def test_a_unit_is_stored_whole_with_its_times(tmp_path):
    with Store.open(str(tmp_path / "s.db")) as store:
        exp = _experiment(store)
        times = RunTimes()
        row = {"step_index": 4, "ratio": 1.5, "axis": "guests", "status": "ok", "guests": 3,
               "vcpus": 3, "guest_memory_mb": 480, "host_cpus": 2, "host_memory_mb": None,
               "detail": {"step": 1}, "error": None}  # fmt: skip
        samples = [{"phase": "window", "t_s": 0.5, "throughput": 10.0}]
        Storing(store, exp).add_unit(row, samples, times)
        steps = store.sweeps.steps(exp)
        assert list(steps["step_index"]) == [4] and list(steps["experiment_id"]) == [exp]
        first = steps.iloc[0]
        assert first["started_at"] <= first["ended_at"] and times.ended_at is not None
        assert store.sweeps.committed_steps(exp) == {4}
        stored = store.sweeps.samples([int(first["id"])])
        assert list(stored["throughput"]) == [10.0]
