"""The vmtax.probe/1 contract: the pydantic side against the shared vectors and the schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from vmtax.contract import (
    Fingerprint,
    Header,
    ProbeInfo,
    json_schema,
    parse_record,
    read_stream,
)

pytestmark = pytest.mark.fast

VECTORS = Path(__file__).parent / "vectors"


def lines(name: str) -> list[str]:
    return (VECTORS / name).read_text().splitlines()


def test_committed_schema_is_the_generated_one():
    committed = json.loads((VECTORS / "schema.json").read_text())
    assert committed == json_schema(), (
        "tests/vectors/schema.json is stale: regenerate with "
        "`python -m vmtax.contract > tests/vectors/schema.json`"
    )


def test_complete_stream_round_trips():
    stream = read_stream(lines("stream_ok.jsonl"))
    assert stream.complete and stream.problem is None
    assert isinstance(stream.header, Header)
    assert stream.header.env.hypervisor.signature == "KVMKVMKVM"
    assert [r.summary.run for r in stream.runs] == [0, 1, 2]
    assert stream.end is not None and stream.end.status == "ok"
    for run in stream.runs:
        assert len(run.values) == run.summary.n == 4
        assert len(run.warmup_values) == 2
        assert run.summary.mean == pytest.approx(np.mean(run.values))
        assert run.summary.stddev == pytest.approx(np.std(run.values, ddof=1))
    # Re-serialising a record by alias gives back the same JSON object.
    for line in lines("stream_ok.jsonl"):
        rec = parse_record(line)
        assert rec.model_dump(by_alias=True, mode="json") == json.loads(line)


def test_header_boot_id_is_optional():
    # The boot a stream ran in; a header from an agent older than the field has none.
    assert read_stream(lines("stream_ok.jsonl")).header.boot_id == (
        "6f1c9a52-3d7e-4b8a-9c41-2e5f0d8b7a13"
    )
    old = read_stream(lines("stream_error.jsonl")).header
    assert old is not None and "boot_id" not in json.loads(lines("stream_error.jsonl")[0])
    assert old.boot_id is None


def test_truncated_stream_keeps_whole_runs_and_names_the_lost_one():
    stream = read_stream(lines("stream_truncated.jsonl"))
    assert not stream.complete
    assert [r.summary.run for r in stream.runs] == [0, 1]
    assert stream.lost_runs == [2]
    assert stream.problem is not None and "\n" not in stream.problem


def test_stream_without_end_is_incomplete():
    whole = lines("stream_ok.jsonl")
    stream = read_stream(whole[:-1])
    assert not stream.complete
    assert len(stream.runs) == 3 and stream.lost_runs == []
    assert "without an end record" in (stream.problem or "")


def test_error_end_is_reported():
    stream = read_stream(lines("stream_error.jsonl"))
    assert stream.end is not None and stream.end.status == "error"
    assert "sched_setaffinity" in (stream.end.error or "")
    assert len(stream.runs) == 1


@pytest.mark.parametrize("line", lines("records_invalid.jsonl"))
def test_invalid_records_are_rejected_with_one_line(line: str):
    with pytest.raises(ValueError) as err:
        parse_record(line)
    assert "\n" not in str(err.value)


def test_summary_count_mismatch_is_a_problem():
    whole = lines("stream_ok.jsonl")
    # Drop one samples record of run 0 (line 3): its summary then claims too many values.
    broken = whole[:2] + whole[3:]
    stream = read_stream(broken)
    assert stream.runs == []
    assert "n=4" in (stream.problem or "")


def test_records_before_header_and_unknown_schema():
    whole = lines("stream_ok.jsonl")
    assert "before the header" in (read_stream(whole[1:]).problem or "")
    header = json.loads(whole[0])
    header["schema"] = "vmtax.probe/2"
    assert "unsupported schema" in (read_stream([json.dumps(header)]).problem or "")


def test_empty_output_is_named():
    assert read_stream([]).problem == "no output from the agent"


def test_env_and_probe_list_vectors():
    env = Fingerprint.model_validate_json((VECTORS / "env.json").read_text())
    assert env.cpu.logical_cpus == 2 and env.nesting.basis
    listed = json.loads((VECTORS / "probe_list.json").read_text())
    probes = [ProbeInfo.model_validate(p) for p in listed]
    assert {p.name for p in probes} == {"cpuid", "cpu"}
    assert all(p.better in ("lower", "higher") for p in probes)


def test_microcode_and_qemu_are_optional_and_written_back_as_read():
    # A fingerprint from before the fields (the shared vector) loads, and dumps as it was:
    # no new nulls in a stored fingerprint or a re-serialised header.
    old_json = json.loads((VECTORS / "env.json").read_text())
    old = Fingerprint.model_validate(old_json)
    assert old.cpu.microcode is None and old.qemu is None
    assert old.model_dump(by_alias=True, mode="json") == old_json
    # The agent's microcode and the controller's QEMU version, when given, are kept.
    new_json = json.loads(json.dumps(old_json))
    new_json["cpu"]["microcode"] = "0xf0"
    new_json["qemu"] = {"version": "7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"}
    new = Fingerprint.model_validate(new_json)
    assert new.cpu.microcode == "0xf0"
    assert new.qemu is not None and new.qemu.version.startswith("7.2.22 ")
    assert new.model_dump(by_alias=True, mode="json") == new_json
    # A header carrying them validates against the shared schema the Rust side uses.
    header = json.loads(lines("stream_ok.jsonl")[0])
    header["env"] = new_json
    jsonschema.validate(header, json_schema())
    with pytest.raises(ValueError):
        Fingerprint.model_validate({**new_json, "qemu": {"release": "7.2"}})  # no version
