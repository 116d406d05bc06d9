"""The real agent binary against the contract: every probe's stream validates, summaries
equal numpy's statistics of the emitted values, a SIGKILL leaves whole runs, bad inputs exit
2 with one line, and the fingerprint describes this machine."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from vmtax.contract import Fingerprint, ProbeInfo, read_stream

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "tests" / "vectors" / "schema.json").read_text())
TARGET = "x86_64-unknown-linux-gnu"


@pytest.fixture(scope="session")
def agent() -> Path:
    """$VMTAX_PROBE, else the release build of probe/ (built here if cargo is present)."""
    explicit = os.environ.get("VMTAX_PROBE")
    if explicit:
        return Path(explicit)
    built = ROOT / "target" / TARGET / "release" / "vmtax-probe"
    cargo = shutil.which("cargo")
    if cargo is None and not built.exists():
        pytest.fail("no agent: set VMTAX_PROBE or install cargo to build probe/", pytrace=False)
    if cargo is not None:
        subprocess.run(
            [cargo, "build", "--release", "--target", TARGET],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    return built


@pytest.fixture(scope="session")
def validator() -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(SCHEMA)
    return cls(SCHEMA)


def _run(agent: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(agent), *args], capture_output=True, text=True, timeout=timeout)


def _probe_names(agent: Path) -> list[str]:
    out = _run(agent, "list", "--format", "json")
    return [ProbeInfo.model_validate(p).name for p in json.loads(out.stdout)]


# Short runs: enough values for statistics, little wall time.
SHORT = ["--runs", "2", "--iterations", "40", "--duration", "0.1", "--warmup", "3"]
PROBES = [
    "cpuid",
    "syscall",
    "write",
    "timer",
    "wakeup",
    "pingpong",
    "ctxswitch",
    "pagefault",
    "cpu",
    "threads",
    "memory",
    "io",
    "spin",
    "halt",
]
PARAMS = {
    "timer": ["--param", "delay_us=100"],
    "threads": ["--param", "yields=50"],
    "halt": ["--param", "sleep_us=20"],
}
#: Probes that need privileges this machine may not grant: tested on both paths below.
PRIVILEGED = ["portio", "mmio"]


#: The agent-side clients of the workloads (docs/workloads.md); their streams are checked in
#: tests/test_workloads_*.py, since most need a server.
WORKLOAD_PROBES = ["tcp_rr", "tcp_stream", "tcp_maerts", "relay", "http", "memcache", "exec"]


def test_list_has_all_twelve_probes(agent: Path) -> None:
    names = set(_probe_names(agent))
    assert names == set(PROBES) | set(WORKLOAD_PROBES) | set(PRIVILEGED)


@pytest.mark.parametrize("probe", PROBES)
def test_probe_stream_is_valid_and_stats_match_numpy(
    agent: Path, validator, probe: str, tmp_path: Path
) -> None:
    extra = list(PARAMS.get(probe, []))
    if probe == "io":
        extra += ["--param", f"dir={tmp_path}", "--param", "file_mb=2"]
    proc = _run(agent, "run", probe, *SHORT, *extra)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for line in lines:
        validator.validate(json.loads(line))
    stream = read_stream(lines)
    assert stream.complete, stream.problem
    assert stream.end is not None and stream.end.status == "ok"
    assert stream.header is not None and stream.header.probe == probe
    assert [r.summary.run for r in stream.runs] == [0, 1]
    for run in stream.runs:
        v, s = run.values, run.summary
        assert len(run.warmup_values) <= 3
        assert s.n == len(v) >= 2
        assert s.mean == pytest.approx(np.mean(v), rel=1e-9)
        assert s.median == pytest.approx(np.median(v), rel=1e-9)
        assert s.stddev == pytest.approx(np.std(v, ddof=1), rel=1e-9)
        assert (s.min, s.max) == (v.min(), v.max())
        assert s.p95 == pytest.approx(np.percentile(v, 95), rel=1e-9)
        assert s.p99 == pytest.approx(np.percentile(v, 99), rel=1e-9)
        assert s.cpus, "the summary names the CPUs used"


def test_a_timer_waited_for_by_spinning_runs_and_says_so(agent: Path) -> None:
    # idle=spin: the agent polls a non-blocking timerfd (the interrupt exit group's probe).
    spin = ["--param", "variant=timerfd", "--param", "idle=spin", "--param", "delay_us=100"]
    proc = _run(agent, "run", "timer", *SHORT, *spin)
    assert proc.returncode == 0, proc.stderr
    stream = read_stream(proc.stdout.splitlines())
    assert stream.complete and stream.end is not None and stream.end.status == "ok"
    assert stream.header is not None and stream.header.params["idle"] == "spin"
    assert all((run.values >= 0).all() and len(run.values) >= 2 for run in stream.runs)


NOBODY = 65534


def _ioperm_errno(user: int | None) -> int:
    """What ioperm(0xed, 1, 1) gives in a forked child as ``user`` (None: as this process):
    0 when the port opens, else its errno; asked of the kernel apart from the agent. (A fork,
    not a new interpreter: another user may not be able to run this one.)"""
    pid = os.fork()
    if pid == 0:  # the child: drop to the user, ask, and leave at once with the answer
        code = 255
        try:
            if user is not None:
                os.setgroups([])
                os.setgid(user)
                os.setuid(user)
            libc = ctypes.CDLL(None, use_errno=True)
            code = 0 if libc.ioperm(0xED, 1, 1) == 0 else ctypes.get_errno()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code != 255, "the child could not ask"
    return code


@pytest.mark.parametrize("as_nobody", [False, True], ids=["as-this-user", "as-nobody"])
def test_portio_times_the_port_or_refuses_in_one_line(
    agent: Path, validator, as_nobody: bool
) -> None:
    # Both paths are decided by the kernel's answer to the same ioperm call, asked apart:
    # where it opens the port (root with CAP_SYS_RAWIO and CONFIG_X86_IOPL_IOPERM) the probe
    # measures; where it does not, the stream ends with the refusal and what to do about it.
    # As root, the agent run as nobody is the refusal path on this machine as well.
    if as_nobody and os.geteuid() != 0:
        pytest.skip("running the agent as another user needs root")
    user = NOBODY if as_nobody else None
    errno_ = _ioperm_errno(user)
    proc = subprocess.run(
        [str(agent), "run", "portio", *SHORT], capture_output=True, text=True, user=user,
        group=user, extra_groups=[] if user is not None else None, timeout=60,
    )  # fmt: skip
    lines = proc.stdout.splitlines()
    for line in lines:
        validator.validate(json.loads(line))
    stream = read_stream(lines)
    assert stream.complete and stream.end is not None, stream.problem
    assert stream.header is not None and stream.header.params == {"port": "0xed", "op": "out"}
    if errno_ == 0:
        assert proc.returncode == 0 and stream.end.status == "ok", proc.stdout[-500:]
        assert [r.summary.run for r in stream.runs] == [0, 1]
        assert all(r.summary.n == len(r.values) >= 2 for r in stream.runs)
        return
    hint = {
        errno.EPERM: "run the agent as root (it needs CAP_SYS_RAWIO)",
        errno.ENOSYS: "this kernel has no ioperm (built without CONFIG_X86_IOPL_IOPERM)",
    }.get(errno_, "port I/O is not available here")
    assert proc.returncode == 1
    assert (stream.end.status, stream.runs, stream.end.runs_completed) == ("error", [], 0)
    assert stream.end.error == f"setup: portio: ioperm(0xed): {os.strerror(errno_)} " + (
        f"(os error {errno_}): {hint}"
    )
    assert proc.stderr == ""


def _testdev() -> Path | None:
    """QEMU's PCI test device (1b36:0005), as sysfs lists it, if this machine has one."""
    for dev in sorted(Path("/sys/bus/pci/devices").glob("*")):
        ids = [(dev / n).read_text().strip() for n in ("vendor", "device") if (dev / n).exists()]
        if ids == ["0x1b36", "0x0005"]:
            return dev
    return None


def test_mmio_reads_the_test_device_or_refuses_in_one_line(agent: Path, validator) -> None:
    # Decided by sysfs apart from the agent: in a vmtax guest (which has QEMU's PCI test
    # device) the probe measures; elsewhere (this machine, bare metal) the stream ends with
    # the refusal and what to do. The measuring path runs in the guests of the nested testbed
    # (tests/test_hostprof_testbed.py), where its exits are counted.
    proc = _run(agent, "run", "mmio", *SHORT)
    lines = proc.stdout.splitlines()
    for line in lines:
        validator.validate(json.loads(line))
    stream = read_stream(lines)
    assert stream.complete and stream.end is not None, stream.problem
    if _testdev() is not None and os.geteuid() == 0:
        assert proc.returncode == 0 and stream.end.status == "ok", proc.stdout[-500:]
        assert all(r.summary.n == len(r.values) >= 2 for r in stream.runs)
        return
    assert proc.returncode == 1
    assert (stream.end.status, stream.runs, stream.end.runs_completed) == ("error", [], 0)
    if _testdev() is None:
        assert stream.end.error == (
            "setup: mmio: no QEMU PCI test device (1b36:0005): vmtax's guests have one; "
            "elsewhere start QEMU with -device pci-testdev"
        )
    assert proc.stderr == ""


def test_buffered_write_flushes_every_buffer_over_len(agent: Path) -> None:
    # 1024-byte buffer, 32-byte lines: the write() lands on every 32nd iteration.
    proc = _run(
        agent,
        "run",
        "write",
        "--runs",
        "1",
        "--iterations",
        "4096",
        "--warmup",
        "0",
        "--param",
        "mode=buffered",
        "--param",
        "buffer=1024",
        "--param",
        "len=32",
    )
    stream = read_stream(proc.stdout.splitlines())
    assert stream.complete, stream.problem
    v = stream.runs[0].values
    assert stream.runs[0].summary.extra["flush_period"] == 32
    slow = np.argsort(v)[-len(v) // 32 :]  # as many slowest values as there were flushes
    phase = np.bincount(slow % 32, minlength=32)
    assert phase.max() / len(slow) > 0.8, phase


def test_sigkill_during_run_3_leaves_runs_0_to_2_whole(agent: Path, validator) -> None:
    proc = subprocess.Popen(
        [
            str(agent),
            "run",
            "cpu",
            "--runs",
            "5",
            "--iterations",
            "1000000",
            "--duration",
            "0.6",
            "--warmup",
            "0",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            rec = json.loads(line)
            if rec["type"] == "run_summary" and rec["run"] == 2:
                time.sleep(0.2)  # well inside run 3, which lasts 0.6 s
                proc.send_signal(signal.SIGKILL)
                break
        lines.extend(proc.stdout.read().splitlines(keepends=True))
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    for line in lines:
        validator.validate(json.loads(line))
    stream = read_stream(lines)
    assert stream.end is None and stream.problem is not None
    assert [r.summary.run for r in stream.runs] == [0, 1, 2]
    assert stream.lost_runs == []  # run 3 had written nothing: runs are flushed whole
    for r in stream.runs:
        assert r.summary.n == len(r.values) > 0


def test_timeout_ends_with_status_timeout(agent: Path) -> None:
    proc = _run(
        agent,
        "run",
        "cpu",
        "--runs",
        "50",
        "--iterations",
        "1000000",
        "--duration",
        "0.3",
        "--timeout",
        "1",
    )
    assert proc.returncode == 1
    stream = read_stream(proc.stdout.splitlines())
    assert stream.complete, stream.problem
    assert stream.end is not None and stream.end.status == "timeout"
    assert stream.end.runs_completed == len(stream.runs) >= 1


def test_sigterm_ends_with_status_interrupted(agent: Path) -> None:
    proc = subprocess.Popen(
        [str(agent), "run", "cpu", "--runs", "50", "--duration", "0.3"],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.8)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1
    stream = read_stream(out.splitlines())
    assert stream.complete, stream.problem
    assert stream.end is not None and stream.end.status == "interrupted"


@pytest.mark.parametrize(
    "args",
    [
        ["run", "nosuchprobe"],
        ["run", "cpu", "--param", "max_prime=abc"],
        ["run", "cpu", "--param", "max_prime=1"],
        ["run", "cpu", "--param", "nosuch=1"],
        ["run", "write", "--param", "mode=sideways"],
        ["run", "timer", "--param", "idle=spin"],  # spinning needs variant=timerfd
        ["run", "cpu", "--runs", "0"],
        ["run", "cpu", "--iterations", "-5"],
        ["run", "cpu", "--duration", "0"],
        ["run", "cpu", "--cpus", "4096"],
        ["run", "cpu", "--cpus", "1-0"],
        ["env", "--format", "yaml"],
        ["nosuchcommand"],
    ],
)
def test_bad_input_exits_2_with_one_line(agent: Path, args: list[str]) -> None:
    proc = _run(agent, *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith("vmtax-probe: error: ")


def test_env_describes_this_machine(agent: Path) -> None:
    proc = _run(agent, "env", "--format", "json")
    assert proc.returncode == 0
    assert len(proc.stdout.splitlines()) == 1
    fp = Fingerprint.model_validate_json(proc.stdout)
    assert fp.cpu.logical_cpus == os.cpu_count()
    assert fp.nesting.basis
    flags = Path("/proc/cpuinfo").read_text().split()
    if "hypervisor" in flags:
        assert fp.hypervisor.detected and fp.hypervisor.signature
        assert fp.nesting.cpuid_cycles and fp.nesting.cpuid_cycles > 0
    # An independent opinion, where systemd can give one.
    detect = shutil.which("systemd-detect-virt")
    vm = (
        subprocess.run([detect, "--vm"], capture_output=True, text=True).stdout.strip()
        if detect
        else ""
    )
    if vm == "kvm":
        assert fp.hypervisor.vendor == "KVM"
        assert fp.hypervisor.signature == "KVMKVMKVM"
        assert fp.nesting.depth is not None and fp.nesting.depth >= 1
    elif vm == "none":
        assert fp.nesting.depth == 0
    if fp.arch == "x86_64":
        assert fp.cpu.tsc_hz and fp.cpu.tsc_hz > 1e8
    # The microcode revision is the first one /proc/cpuinfo shows; where it shows none (many
    # guests) the field is left out, not written as null.
    pairs = [ln.partition(":") for ln in Path("/proc/cpuinfo").read_text().splitlines()]
    shown = [v.strip() for k, _, v in pairs if k.strip() == "microcode" and v.strip()]
    assert fp.cpu.microcode == (shown[0] if shown else None)
    assert ("microcode" in json.loads(proc.stdout)["cpu"]) == bool(shown)


def test_env_text_is_human(agent: Path) -> None:
    proc = _run(agent, "env")
    assert proc.returncode == 0
    assert "hypervisor" in proc.stdout and "nesting" in proc.stdout
