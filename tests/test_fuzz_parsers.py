"""Generated inputs for the three parsers that read what users and agents hand vmtax: the
agent's stream (contract.read_stream), suite TOML (plan.suite.parse_suite) and fleet files
(targets.fleet.parse_fleet: hosts.toml; Ansible reads its own inventories).

Properties: no exception but the documented one-line UsageError escapes, and a run whose
stream broke off is never returned (nor stored) as complete.

The default run is lean (VMTAX_FUZZ_EXAMPLES, default 150 per test). The full run:

    VMTAX_FUZZ_EXAMPLES=13000 python3 -m pytest -q tests/test_fuzz_parsers.py

is 8 tests x 13000 = 104,000 inputs (plus the store test at a tenth of that).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vmtax.contract import read_stream
from vmtax.errors import UsageError

pytestmark = pytest.mark.fast

EXAMPLES = int(os.environ.get("VMTAX_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # no example database left in the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
)  # fmt: skip
VECTORS = Path(__file__).parent / "vectors"
OK_LINES = (VECTORS / "stream_ok.jsonl").read_text().splitlines()

# -- the agent's stream ---------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
)  # fmt: skip
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


def _check_stream(lines: list[str]) -> None:
    out = read_stream(lines)  # must not raise
    for run in out.runs:
        # A run is returned only with its summary, and only with all its samples.
        assert len(run.values) == run.summary.n
    if out.complete:
        assert out.end is not None and out.problem is None
    else:
        assert out.problem  # an incomplete stream always says why (the runner makes it one
        # line: contract.parse_record can quote a record's newlines into it)


@FUZZ
@given(st.lists(st.text(max_size=200), max_size=20))
def test_fuzz_stream_arbitrary_text(lines):
    _check_stream(lines)


@st.composite
def mutated_streams(draw):
    """A real agent stream (the test vector), then cut, dropped, repeated, swapped or with a
    field replaced by any JSON value."""
    lines = list(OK_LINES)
    for _ in range(draw(st.integers(0, 4))):
        if not lines:
            break
        op = draw(st.sampled_from(["cut", "drop", "dup", "swap", "field", "bytes"]))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "cut":
            lines = lines[:i]
        elif op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "bytes":
            k = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:k] + draw(st.text(max_size=5)) + lines[i][k:]
        else:
            try:
                rec = json.loads(lines[i])
            except ValueError:
                continue  # a line an earlier step broke: nothing to replace in it
            if not isinstance(rec, dict) or not rec:
                continue
            key = draw(st.sampled_from(sorted(rec)))
            rec[key] = draw(json_values)
            lines[i] = json.dumps(rec)
    return lines


def _summaries_kept(lines: list[str]) -> int:
    """How many run_summary records survive, unharmed, in ``lines``."""
    return sum(1 for ln in lines if '"type": "run_summary"' in ln)


@FUZZ
@given(mutated_streams())
def test_fuzz_stream_mutations_of_a_real_stream(lines):
    _check_stream(lines)
    out = read_stream(lines)
    assert len(out.runs) <= _summaries_kept(lines)
    if lines != OK_LINES and out.complete:
        # Only harmless changes (e.g. a duplicated sample line making n disagree is not one).
        assert out.end is not None


@FUZZ
@given(st.integers(0, len(OK_LINES) - 1), st.integers(0, 400))
def test_fuzz_stream_cut_anywhere_keeps_only_whole_runs(line, char):
    """The agent killed at any byte: only runs whose summary line arrived whole are kept, and
    the stream is never complete."""
    cut = [*OK_LINES[:line], OK_LINES[line][:char]]
    out = read_stream(cut)
    assert out.complete == (line == len(OK_LINES) - 1 and char >= len(OK_LINES[line]))
    arrived = OK_LINES[:line] + ([OK_LINES[line]] if char >= len(OK_LINES[line]) else [])
    whole = [json.loads(x)["run"] for x in arrived if '"run_summary"' in x]
    assert [r.summary.run for r in out.runs] == whole


# -- the store: a partial run is never stored as complete -------------------------------------


class _Replay:
    """A target that replays generated agent output. A fuzzed stream cannot come from the
    real agent, so this stands in for one; everything after it (runner, store) is real."""

    name = "replay"
    level = "L0"
    last_stderr = ""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def run_agent(self, args, timeout):
        del args, timeout
        yield from self.lines


@pytest.fixture(scope="module")
def replay_store(tmp_path_factory):
    from vmtax.store import Store

    store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'fuzz.db'}")
    yield store
    store.close()


@settings(FUZZ, max_examples=max(20, EXAMPLES // 10))
@given(mutated_streams())
def test_fuzz_runner_never_stores_a_partial_run_as_ok(replay_store, lines):
    """The real runner reads each generated stream and stores the run: ok only when a whole
    run arrived, with exactly its samples; otherwise lost or failed, with a reason."""
    from vmtax.contract import Fingerprint
    from vmtax.execution import Storing
    from vmtax.plan.plan import build_plan
    from vmtax.plan.suite import parse_suite
    from vmtax.runner import Runner, TargetOutcome

    store = replay_store
    suite = parse_suite('name = "fuzz"\n[[probes]]\nprobe = "cpuid"\nruns = 1\n', "fuzz.toml")
    plan = build_plan(suite, source="fuzz", seed=1, targets=[{"kind": "local", "level": "L0"}])
    exp = store.create_experiment(command=["fuzz"], suite="fuzz", seed=0, plan={},
                                  vmtax_version="t", agent_version=None)  # fmt: skip
    cfg = store.configuration(experiment_id=exp, level="L0", labels={}, fingerprint={},
                              target="replay", provenance={})  # fmt: skip
    target = _Replay(lines)
    runner = Runner(store, plan, [target])
    runner._storing = Storing(store, exp)  # what execute() gives the experiment it runs
    fp = Fingerprint.model_validate(json.loads(OK_LINES[0])["env"])
    status = runner._run_step(cfg, target, plan.steps[0], fp,
                              TargetOutcome(name="replay", level="L0"))  # fmt: skip
    runs = store.runs([f"exp={exp}"])
    assert len(runs) == 1
    row = runs.iloc[0]
    assert row["status"] == status
    stream = read_stream(lines)
    if status == "ok":
        first = stream.runs[0]
        got = store.samples([row["run_id"]])[row["run_id"]]
        assert np.array_equal(got, first.values) and row["n"] == len(got)
    else:
        assert not stream.runs
        assert row["error"] and pd.isna(row["mean"])  # nothing summarised for a partial run


# -- suites ---------------------------------------------------------------------------------


def _toml_value(v) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(v)


def _toml(doc: dict) -> str:
    out = []
    for k, v in doc.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            continue
        out.append(f"{json.dumps(k)} = {_toml_value(v)}")
    for k, v in doc.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for item in v:
                out.append(f"[[{json.dumps(k)}]]")
                out += [f"{json.dumps(a)} = {_toml_value(b)}" for a, b in item.items()]
    return "\n".join(out) + "\n"


toml_scalars = st.one_of(
    st.booleans(), st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
    st.sampled_from(["1s", "500ms", "2%", "0", "-1", "L9", "", "cpuid", "1e400"]),
)  # fmt: skip
suite_keys = st.sampled_from(
    ["name", "description", "seed", "precision", "budget", "min_runs", "runs", "iterations",
     "duration", "warmup", "timeout", "cpus", "probe", "params", "scale_to_memory", "x"]
)  # fmt: skip
suite_entries = st.dictionaries(
    suite_keys,
    toml_scalars | st.dictionaries(st.text(max_size=6), toml_scalars, max_size=3)
    | st.lists(st.dictionaries(st.sampled_from(["param", "fraction", "unit", "per_param",
                                                "power_of_two", "minimum", "maximum"]),
                               toml_scalars, max_size=4), max_size=2),
    max_size=6,
)  # fmt: skip


@st.composite
def suite_docs(draw):
    doc = draw(st.dictionaries(suite_keys, toml_scalars, max_size=5))
    if draw(st.booleans()):
        doc["name"] = draw(st.text(min_size=1, max_size=8))
    if draw(st.booleans()):
        doc["defaults"] = draw(st.dictionaries(suite_keys, toml_scalars, max_size=4))
    entries = draw(st.lists(suite_entries, max_size=4))
    for e in entries:
        if draw(st.booleans()):
            e["probe"] = draw(st.sampled_from(["cpuid", "syscall", "memory", ""]))
    doc["probes"] = entries
    return doc


def _parse_suite_or_usage_error(text: str) -> None:
    from vmtax.plan.suite import Suite, parse_suite

    try:
        suite = parse_suite(text, "fuzz.toml")
    except UsageError as exc:
        assert "\n" not in exc.message and exc.message.startswith("suite fuzz.toml")
        return
    assert isinstance(suite, Suite) and suite.probes


@FUZZ
@given(st.text(max_size=300))
def test_fuzz_suite_arbitrary_text(text):
    _parse_suite_or_usage_error(text)


@FUZZ
@given(suite_docs())
def test_fuzz_suite_structured(doc):
    _parse_suite_or_usage_error(_toml(doc))


# -- fleet files ----------------------------------------------------------------------------

host_values = st.one_of(
    toml_scalars,
    st.sampled_from(["ssh://a", "ssh://u@h:22", "ssh://[::1", "ssh://u:pw@h", "http://x",
                     "ssh://h:99999", "L0", "L4", "~/.ssh/id", "ssh://u@[fe80::1]:2"]),
)  # fmt: skip
host_keys = st.sampled_from(
    ["url", "name", "identity", "known_hosts", "accept_new_host_key", "labels", "level",
     "agent", "remote_dir", "passphrase_env", "port"]
)  # fmt: skip


@st.composite
def fleet_toml(draw):
    doc = {}
    if draw(st.booleans()):
        doc["max_concurrency"] = draw(toml_scalars)
    hosts = draw(st.lists(st.dictionaries(host_keys, host_values | st.dictionaries(
        st.text(max_size=4), toml_scalars, max_size=2), max_size=5), max_size=4))  # fmt: skip
    doc["hosts"] = hosts
    text = _toml(doc)
    if draw(st.booleans()):
        text += "[defaults]\n" + "".join(
            f"{json.dumps(k)} = {_toml_value(v)}\n"
            for k, v in draw(st.dictionaries(host_keys, host_values, max_size=3)).items()
        )
    return text


def _parse_fleet_or_usage_error(text: str, name: str) -> None:
    from vmtax.targets.fleet import FleetFile, parse_fleet

    try:
        fleet = parse_fleet(text, Path(name))
    except UsageError as exc:
        assert "\n" not in exc.message, exc.message
        return
    assert isinstance(fleet, FleetFile) and fleet.hosts and fleet.max_concurrency >= 1
    for hv in fleet.hosts.values():
        assert hv["ansible_host"] and hv["vmtax_level"] in ("L0", "L1", "L2", "L3")


@FUZZ
@given(st.text(max_size=300), st.just("hosts.toml"))
def test_fuzz_fleet_arbitrary_text(text, name):
    _parse_fleet_or_usage_error(text, name)


@FUZZ
# Ansible's inventories are Ansible's to parse (ansible-inventory); hosts.toml is ours.
@given(fleet_toml().map(lambda t: (t, "hosts.toml")))
def test_fuzz_fleet_structured(case):
    _parse_fleet_or_usage_error(*case)
