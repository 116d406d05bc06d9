"""The workload plug-in contract: every workload declares it, presets and parameters resolve,
the plan checks workload parameters like probe parameters, and `vmtax workloads` lists them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vmtax.contract import read_stream
from vmtax.errors import UsageError
from vmtax.plan.plan import build_plan
from vmtax.plan.suite import load_suite, parse_suite
from vmtax.runner import check_probes
from vmtax.workloads import REGISTRY, infos
from vmtax.workloads.base import Invocation, WorkloadError

EXPECTED = {"hackbench", "oltp", "http", "memcached", "net", "relay", "crypto", "static"}


@pytest.mark.fast
def test_every_workload_declares_the_contract():
    assert set(REGISTRY) == EXPECTED
    for name, w in REGISTRY.items():
        info = w.info()
        assert info.name == name
        assert info.summary and info.mechanism and info.unit
        assert info.better in ("lower", "higher")
        names = [p.name for p in info.params]
        assert "preset" in names and len(names) == len(set(names))
        # Every preset only sets declared parameters, and resolves.
        for preset, values in w.presets.items():
            assert set(values) <= set(names), (name, preset)
            assert w.resolve({"preset": preset})["preset"] == preset


@pytest.mark.fast
def test_presets_are_the_studies_sizes_and_explicit_params_win():
    oltp = REGISTRY["oltp"]
    assert oltp.resolve({})["table_size"] == 10000  # small default
    a = oltp.resolve({"preset": "study-a"})
    assert (a["table_size"], a["threads"]) == (1_000_000, 4)
    assert oltp.resolve({"preset": "study-a", "threads": "8"})["threads"] == 8
    c = REGISTRY["hackbench"].resolve({"preset": "study-c"})
    assert (c["groups"], c["loops"]) == (100, 500)
    assert REGISTRY["http"].resolve({"preset": "study-c"})["file"] == "file41k"
    with pytest.raises(WorkloadError, match="no preset"):
        oltp.resolve({"preset": "study-z"})
    with pytest.raises(WorkloadError, match="no parameter 'rows'"):
        oltp.resolve({"rows": "5"})
    with pytest.raises(WorkloadError, match="must be one of"):
        oltp.resolve({"db": "oracle"})


@pytest.mark.fast
def test_invocation_reads_the_plans_agent_arguments():
    suite = parse_suite(
        'name = "t"\n[[probes]]\nprobe = "oltp"\nduration = 2.5\niterations = 7\n'
        'params = { db = "pgsql" }\n',
        "t.toml",
    )
    plan = build_plan(suite, source="t", seed=1, targets=[{"kind": "local"}])
    for tsc_hz in (None, 2.3e9):  # the agent's own flags leave the rest in place
        inv = plan.invocation(plan.steps[0], None, tsc_hz=tsc_hz)
        parsed = Invocation.from_args(inv.args, inv.timeout)
        assert (parsed.name, parsed.duration, parsed.iterations) == ("oltp", 2.5, 7)
        assert parsed.params == {"db": "pgsql"}


@pytest.mark.fast
def test_the_plan_check_knows_workload_parameters():
    suite, _ = load_suite("apps-quick")
    assert {e.probe for e in suite.probes} == EXPECTED
    plan = build_plan(suite, source="builtin", seed=1, targets=[{"kind": "local"}])
    check_probes(plan, infos())
    bad = parse_suite('name = "t"\n[[probes]]\nprobe = "http"\nparams = { size = 1 }\n', "t")
    with pytest.raises(UsageError, match="no parameter 'size'"):
        check_probes(build_plan(bad, source="t", seed=1, targets=[{"kind": "local"}]), infos())
    bad = parse_suite('name = "t"\n[[probes]]\nprobe = "net"\nparams = { test = "udp" }\n', "t")
    with pytest.raises(UsageError, match="must be one of"):
        check_probes(build_plan(bad, source="t", seed=1, targets=[{"kind": "local"}]), infos())


@pytest.mark.fast
def test_vmtax_workloads_lists_them(cli):
    res = cli("workloads", "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert set(rows) == EXPECTED
    assert rows["oltp"]["presets"]["study-a"]["table_size"] == 1_000_000
    assert all(r["runs_in_guests"] for r in rows.values())  # oltp: MariaDB only (docs)
    assert all(not r["missing"] for r in rows.values()), rows  # everything is installed here
    text = cli("workloads")
    assert text.returncode == 0 and "hackbench" in text.stdout
    assert cli("workloads", "--format", "xml").returncode == 2


SCHEMA = json.loads((Path(__file__).parent / "vectors" / "schema.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("net", ["test=rr"]),
        ("relay", ["relays=2"]),
        ("hackbench", ["groups=1", "loops=10"]),
        ("crypto", ["aesni=on"]),  # the agent's exec probe, relabelled MB/s
        ("memcached", ["threads=0"]),  # a server that does not start: header + error end
    ],
)
def test_workload_streams_follow_the_agents_schema(name, params):
    import jsonschema

    from vmtax.targets.base import find_agent
    from vmtax.targets.local import LocalTarget
    from vmtax.workloads import run_lines

    args = ["run", name, "--iterations", "2", "--duration", "0.1", "--warmup", "0"]
    for p in params:
        args += ["--param", p]
    lines = list(run_lines(LocalTarget(find_agent()), args, 60.0))
    validator = jsonschema.validators.validator_for(SCHEMA)(SCHEMA)
    for line in lines:
        validator.validate(json.loads(line))
    stream = read_stream(lines)
    assert stream.complete and stream.header.probe == name
    if name == "memcached":
        assert stream.end.status == "error" and "did not start" in stream.end.error
    else:
        assert stream.end.status == "ok" and len(stream.runs) == 1
    if name == "crypto":
        assert (stream.header.unit, stream.header.better) == ("MB/s", "higher")
        assert stream.header.params["agent_probe"] == "exec"
        assert all(json.loads(x)["unit"] == "MB/s" for x in lines if '"samples"' in x[:20])


@pytest.mark.fast
def test_server_workloads_start_their_servers_on_the_targets_vmtax_knows():
    from vmtax.targets.base import Target
    from vmtax.targets.qemu import GuestSpec, QemuTarget
    from vmtax.targets.servers import ServerError
    from vmtax.workloads import http, memcached

    class Elsewhere(Target):
        """A kind of target vmtax has no way to start servers on (none exists yet)."""

        name, level = "elsewhere", "L0"

        def prepare(self) -> None: ...

        def run_agent(self, args, timeout):
            yield from ()

    guest = QemuTarget("L1", GuestSpec(vcpus=1, memory_mb=256, accel="tcg"))  # not booted
    with guest.place_server(http.SERVER) as placed:
        # The agent in the guest starts lighttpd from the files its image carries.
        assert placed.port == http.GUEST_PORT and placed.here is None
        assert placed.agent_params == {
            "server": f"/usr/sbin/lighttpd -D -f {http.GUEST_DIR}/lighttpd.conf"
        }
    assert http.SERVER.guest_files().keys() <= REGISTRY["http"].guest_files.keys()
    with guest.place_server(memcached.server(["-t", "2"])) as placed:
        assert placed.agent_params["server"].endswith("-p 11211 -u root")
    assert guest.guest is None  # placing a guest's server boots nothing by itself
    with pytest.raises(ServerError, match=r"cannot start lighttpd on elsewhere: a server runs"):
        Elsewhere().place_server(http.SERVER)
    assert issubclass(WorkloadError, ServerError)  # either ends the run, never the target
