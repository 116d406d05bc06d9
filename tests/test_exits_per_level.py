"""The exit recorder per measured level (`vmtax run --exits L2=trace,L3=counts`): what
`--exits` takes and refuses, what an experiment stores and reads back, and which mode each
target's runs are recorded in."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from vmtax.errors import UsageError
from vmtax.experiment.request import RunRequest
from vmtax.experiment.run import _exit_recorders, _stored_exits
from vmtax.hostprof import modes, recorder
from vmtax.hostprof.recorder import Recorder

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (None, {}),
        (False, {}),
        (True, {"*": "counts"}),
        ("counts", {"*": "counts"}),
        ("trace", {"*": "trace"}),
        ("L2=trace,L3=counts", {"L2": "trace", "L3": "counts"}),
        ("l2 = Trace, L3=counts", {"L2": "trace", "L3": "counts"}),
        ("counts,L2=trace", {"*": "counts", "L2": "trace"}),
    ],
)
def test_exits_takes_one_mode_or_a_mode_per_level(value, want):
    assert modes.parse_modes(value) == want


@pytest.mark.parametrize(
    ("value", "line"),
    [
        ("bogus", "--exits must be counts or trace (alone: counts), got 'bogus'"),
        (
            "L4=trace",
            "--exits L4=trace: unknown level 'L4' (levels: L1, L2, L3; L0 has no host side)",
        ),
        (
            "L0=counts",
            "--exits L0=counts: unknown level 'L0' (levels: L1, L2, L3; L0 has no host side)",
        ),
        ("L2=fast", "--exits L2=fast: the mode of L2 must be counts or trace, got 'fast'"),
        ("L2=", "--exits L2=: the mode of L2 must be counts or trace, got ''"),
        ("L2=trace,L2=counts", "--exits L2=trace,L2=counts: L2 is given twice"),
        ("trace,counts,L3=counts", "--exits trace,counts,L3=counts: a bare mode is given twice"),
    ],
)
def test_an_unknown_level_or_mode_is_refused_in_one_line(value, line):
    with pytest.raises(UsageError) as err:
        modes.parse_modes(value)
    assert str(err.value.message) == line


def test_the_request_refuses_a_level_the_run_does_not_measure_and_requires_each_mode(
    monkeypatch,
):
    bad = RunRequest(levels="L2,L3", inner_accel="kvm", exits="L1=trace,L3=counts")
    with pytest.raises(UsageError, match=r"this run measures no L1 \(--levels L2,L3\)$"):
        bad.validate()
    with pytest.raises(UsageError, match="measures no L2 .--levels none: this machine, L0.$"):
        RunRequest(exits="L2=trace").validate()
    # Whether this machine has QEMU 7.1 and histogram triggers is not this test's question:
    # each mode the request names is asked for, once.
    asked: list[str] = []
    monkeypatch.setattr(modes, "require", asked.append)
    RunRequest(levels="L2,L3", inner_accel="kvm", exits="L2=trace,L3=counts").validate()
    assert asked == ["counts", "trace"]
    asked.clear()
    RunRequest(levels="L1,L2", exits="trace").validate()
    assert asked == ["trace"]


def test_the_cli_refuses_a_bad_level_in_one_line_and_exit_2(cli, tmp_path):
    db = f"sqlite:///{tmp_path / 'x.db'}"
    res = cli("run", "--levels", "L2,L3", "--inner-accel", "kvm", "--exits", "L4=trace",
              "--db", db)  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "vmtax: error: --exits L4=trace: unknown level 'L4' (levels: L1, L2, L3; L0 has no "
        "host side)"
    ]
    assert not (tmp_path / "x.db").exists()  # refused before the store was opened


@pytest.mark.parametrize(
    "value", [None, True, "counts", "trace", "L2=trace,L3=counts", "counts,L2=trace"]
)
def test_what_is_stored_reads_back_as_the_same_recorders(value):
    parsed = modes.parse_modes(value)
    stored = modes.stored_modes(parsed)
    # One mode for every level is stored as it always was (a string), so experiments
    # stored before per-level modes and after read alike.
    assert isinstance(stored, dict) == (set(parsed) - {"*"} != set())
    assert _stored_exits(stored) == parsed


def test_experiments_stored_before_per_level_modes_read_as_they_ran():
    assert _stored_exits(True) == {"*": "trace"}  # the first --exits was a tracing run
    assert _stored_exits(False) == _stored_exits(None) == _stored_exits("") == {}
    assert _stored_exits("counts") == {"*": "counts"}


@dataclass
class _Target:
    name: str
    level: str


def test_each_target_is_recorded_in_its_levels_mode(monkeypatch):
    # The host sides (a guest's KVM and its agent, reached through a booted QEMU) cannot
    # exist here: begin, end, the start-up's agent run and the store's write are replaced by
    # records of what the recorder asked of them; which mode it asks in is the question.
    asked: list[tuple[str, str, str]] = []
    saved: list[tuple[int, str, str]] = []

    def begin(mode, target, side, note=None):
        asked.append(("begin", target.name, mode))
        return "", {}

    def end(mode, target, side, begun):
        asked.append(("end", target.name, mode))
        return {"complete": True, "reasons": []}

    monkeypatch.setattr(recorder, "begin", begin)
    monkeypatch.setattr(recorder, "end", end)
    monkeypatch.setattr(recorder, "run_lines", lambda target, args, timeout: iter(()))
    monkeypatch.setattr(
        recorder, "save_profile", lambda store, run_id, level, profile, name: saved.append(
            (run_id, level, name)) or run_id,
    )  # fmt: skip
    (rec,) = _exit_recorders(None, modes.parse_modes("L2=trace,L3=counts"))  # type: ignore[arg-type]
    assert isinstance(rec, Recorder)
    sides = {"L2": {"L1": _Target("host-L1", "L1")},
             "L3": {"L1": _Target("host-L1", "L1"), "L2": _Target("host-L2", "L2")}}  # fmt: skip
    rec._sides = lambda t: sides.get(t.level, {})  # type: ignore[assignment]

    for run_id, target in enumerate([_Target("qemu-L1", "L1"), _Target("qemu-L2", "L2"),
                                     _Target("qemu-L3", "L3")], start=1):  # fmt: skip
        rec.before_run(target, None, ["run", "cpuid"])  # type: ignore[arg-type]
        rec.after_run(target, None, run_id, "ok")  # type: ignore[arg-type]

    assert {name: rec.mode_for(_Target(name, name)) for name in ("L1", "L2", "L3")} == {
        "L1": "", "L2": "trace", "L3": "counts",
    }  # fmt: skip
    assert not [a for a in asked if a[1] == "qemu-L1"]  # L1 is not recorded at all
    assert {a[2] for a in asked if a[1] == "qemu-L2"} == {"trace"}
    assert {a[2] for a in asked if a[1] == "qemu-L3"} == {"counts"}
    # The profile's recorder is the mode's: tracefs for L2's run, KVM's counters for L3's
    # (on both of its host sides).
    assert saved == [(2, "L1", "tracefs"), (3, "L1", "kvm-stats"), (3, "L2", "kvm-stats")]


def test_one_mode_records_every_level_in_it():
    rec = Recorder(None, mode="trace")  # type: ignore[arg-type]
    assert [rec.mode_for(_Target(n, n)) for n in ("L1", "L2", "L3")] == ["trace"] * 3
    with pytest.raises(ValueError, match="counts or trace, not 'fast'"):
        Recorder(None, modes={"L2": "fast"})  # type: ignore[arg-type]
