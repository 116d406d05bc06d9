"""QEMU guests vmtax boots itself: the process, its QMP monitor, vCPU pinning and the
virtio-serial channel to the agent, which runs as PID 1 inside the guest.

Every guest lives in its own process group and temporary directory. ``stop()`` kills the
group and removes the directory; it runs on success, error, timeout, Ctrl-C (``finally``)
and at interpreter exit (``atexit``), so no QEMU process or socket is left behind. A
controller killed outright runs none of that: then the agent's ``watchdog``, which QEMU runs
under, kills QEMU and removes the directory (see ``QemuGuest.start``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from qemu.qmp import QMPError
from qemu.qmp.legacy import QEMUMonitorProtocol

from vmtax.doctor.leftovers import SCRATCH_PREFIX, write_owner
from vmtax.targets.base import (
    AgentTimeout,
    Capabilities,
    QemuStartError,
    Target,
    TargetError,
    find_agent,
    free_port,
)
from vmtax.targets.images import (
    AGENT_ONLY,
    FIRMWARE_DIRS,
    Image,
    ImageContents,
    build_nested,
)
from vmtax.targets.local import LocalTarget
from vmtax.targets.servers import HostEnd, Listener, PlacedServer, ServerError, ServerSpec, Spot

QEMU = "qemu-system-x86_64"
#: How long a guest may take from power-on to the agent's ``serve_ready`` (TCG is slow).
DEFAULT_BOOT_TIMEOUT = 180.0

_live: set[QemuGuest] = set()
_live_lock = threading.Lock()


@dataclass(frozen=True)
class GuestSpec:
    """The size and accelerator of one guest."""

    vcpus: int
    memory_mb: int
    accel: str  # "tcg" | "kvm"
    pin: bool = True
    #: Size of the guest's scratch disk (/tmp on ext2 inside); 0 for none.
    scratch_mb: int = 256
    #: QEMU -cpu model; None = ``host`` under KVM (as study A), ``max`` under TCG.
    cpu: str | None = None
    extra_append: tuple[str, ...] = ()
    #: More QEMU arguments, appended as given (a sweep backs guest RAM with a file).
    extra_args: tuple[str, ...] = ()
    #: Names of more virtio-serial ports, each on its own socket (``host-<name>.sock``):
    #: the host sides of inner levels (see ``QemuTarget.host_sides``).
    host_ports: tuple[str, ...] = ()
    #: "user": a virtio-net NIC on QEMU's user network, where this machine is 10.0.2.2
    #: (its loopback) and the guest 10.0.2.15; "": no network device.
    network: str = ""
    #: Boot the uncompressed kernel at its PVH entry where the image has one (seconds
    #: faster under TCG); False boots the compressed one, as a sweep's guests do: QEMU keeps
    #: the loaded segments for a reset, about 20 MiB more of its own memory, which a sweep's
    #: memory cap would count.
    pvh: bool = True


#: The guest's TCP ports that a user network forwards from this machine's loopback (QEMU's
#: ``hostfwd``), so that this machine and other guests can connect in: to
#: ``127.0.0.1:<QemuGuest.forwards[port]>`` here, or ``10.0.2.2:<that port>`` from a guest.
FORWARDED_PORTS = (7100, 7101, 7102, 7103)
#: This machine as a guest on QEMU's user network sees it.
HOST_FROM_GUEST = "10.0.2.2"


#: q35 without the devices no guest of vmtax uses, whose probing is slow under TCG.
MACHINE = "q35,i8042=off,sata=off,smbus=off,vmport=off"
#: Kernel arguments that skip boot work vmtax's guests do not need: the crypto self-tests
#: (``crypto_algapi_init`` runs them all at once: 2.7 s of a boot under TCG), probing three
#: absent serial ports, the IO-APIC timer check (it waits for ticks), and scanning PCI
#: buses 1-255 and (twice) all 256 for an AGP bridge: every device is on bus 0. Not
#: ``nowatchdog`` (vmtax reads the soft-lockup watchdog's lines to tell a hung boot) nor
#: ``tsc=reliable`` (it would move the clocksource the probes measure from the HPET to
#: the TSC).
BOOT_ARGS = ("cryptomgr.notests", "8250.nr_uarts=1", "no_timer_check", "pci=noearly,lastbus=0")
#: The small firmware guests boot with instead of SeaBIOS (QEMU's own data directory).
QBOOT = "qboot.rom"


def firmware_args() -> list[str]:
    """``-bios qboot.rom`` where QEMU ships it, else nothing (SeaBIOS, QEMU's default)."""
    found = any((d / QBOOT).is_file() for d in FIRMWARE_DIRS)
    return ["-bios", QBOOT] if found else []


def qemu_binary() -> str:
    path = shutil.which(QEMU)
    if not path:
        raise TargetError(f"{QEMU} not found: install qemu-system-x86")
    return path


#: How long ``qemu-system-x86_64 --version`` may take, and how much of what it prints is read.
VERSION_TIMEOUT_S = 10.0
VERSION_MAX_BYTES = 4096


def qemu_version() -> str | None:
    """The version of this machine's QEMU as its ``--version`` says it after "version"
    (``7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)``: the distribution's build, which a
    security update changes, included); None when there is no QEMU or it does not say.
    Every guest level runs on this binary: a nested image ships it (``build_nested``).
    Asked once per binary (its path, size and modification time)."""
    path = shutil.which(QEMU)
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _version_of(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _version_of(path: str, _size: int, _mtime_ns: int) -> str | None:
    first = _first_line([path, "--version"], VERSION_MAX_BYTES, VERSION_TIMEOUT_S)
    _, found, rest = first.partition(" version ")
    version = " ".join(rest.split())
    return version if found and version else None


def _first_line(argv: list[str], limit: int, timeout: float) -> str:
    """The first line of what ``argv`` prints, reading at most ``limit`` bytes for at most
    ``timeout`` seconds; the program is killed if it is still running then. "" when it
    cannot be started, or its first line does not end within those bounds."""
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    except OSError:
        return ""
    assert proc.stdout is not None
    out = b""
    ended = False
    deadline = time.monotonic() + timeout
    try:
        while len(out) < limit and b"\n" not in out:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
                break
            chunk = os.read(proc.stdout.fileno(), limit - len(out))
            ended = not chunk
            if ended:
                break
            out += chunk
    finally:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.stdout.close()
        proc.wait()
    line, newline, _ = out.partition(b"\n")
    return line.decode("utf-8", "replace").strip() if newline or ended else ""


def qemu_argv(
    image: Image,
    spec: GuestSpec,
    workdir: Path,
    *,
    agent_args: list[str] | None = None,
    paused: bool = True,
    forwards: dict[int, int] | None = None,
) -> list[str]:
    """The full QEMU command line. ``agent_args`` runs the agent one-shot instead of serving;
    ``forwards`` maps guest ports to this machine's loopback ports (user network only).

    Trimmed for boot time (docs/levels.md, "What a boot costs"; bench/boot_cost.py): the
    uncompressed kernel's PVH entry (``Image.boot_kernel``), qboot instead of SeaBIOS, no
    i8042, SATA, SMBus or VMware port, and ``BOOT_ARGS``. The HPET stays: with the TSC
    marked unstable under TCG it is the guest's clocksource, which the probes measure."""
    append = ["console=ttyS0", "quiet", "panic=-1", *BOOT_ARGS, *spec.extra_append]
    if agent_args:
        append += ["--", *agent_args]
    argv = [
        qemu_binary(),
        "-name",
        "vmtax-guest,debug-threads=on",  # vCPU threads named CPU n/KVM: exits filter them
        "-nodefaults",
        "-no-user-config",
        "-machine",
        MACHINE,
        *firmware_args(),
        # TCG with one host thread per vCPU (MTTCG), as the nested-KVM testbed was tried.
        "-accel",
        "tcg,thread=multi" if spec.accel == "tcg" else spec.accel,
        # TCG: the richest emulated CPU; KVM: the host's own CPU model (study A used -cpu host).
        "-cpu",
        spec.cpu or ("host" if spec.accel == "kvm" else "max"),
        "-smp",
        str(spec.vcpus),
        "-m",
        f"{spec.memory_mb}M",
        "-display",
        "none",
        "-no-reboot",
        "-serial",
        f"file:{workdir / 'console.log'}",
        "-kernel",
        str(image.boot_kernel if spec.pvh else image.kernel),
        "-initrd",
        str(image.initrd),
        "-append",
        " ".join(append),
        "-qmp",
        f"unix:{workdir / 'qmp.sock'},server=on,wait=off",
        # The register the mmio probe reads (an MMIO exit under KVM): QEMU's PCI test device,
        # made for timing exits. No driver claims it, so its BAR is the probe's to map.
        "-device",
        "pci-testdev",
    ]
    if agent_args is None:
        argv += [
            "-device",
            "virtio-serial-pci,id=vser0",
            "-chardev",
            f"socket,id=vmtax,path={workdir / 'vmtax.sock'},server=on,wait=off",
            "-device",
            "virtserialport,bus=vser0.0,chardev=vmtax,name=vmtax",
        ]
        for i, name in enumerate(spec.host_ports):
            argv += [
                "-chardev",
                f"socket,id=host{i},path={workdir / f'host-{name}.sock'},server=on,wait=off",
                "-device",
                f"virtserialport,bus=vser0.0,chardev=host{i},name={name}",
            ]
    if spec.scratch_mb:
        argv += [
            "-drive",
            f"file={workdir / 'scratch.img'},format=raw,if=none,id=scratch",
            "-device",
            "virtio-blk-pci,drive=scratch",
        ]
    if spec.network == "user":
        fwd = "".join(
            f",hostfwd=tcp:127.0.0.1:{host}-:{guest}" for guest, host in (forwards or {}).items()
        )
        argv += ["-netdev", f"user,id=net0{fwd}", "-device", "virtio-net-pci,netdev=net0"]
    argv += list(spec.extra_args)
    if paused:
        argv.append("-S")
    return argv


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise TargetError(f"QEMU did not create {path.name}")
        time.sleep(0.01)


class AgentChannel:
    """One virtio-serial port of a guest, through its host socket: requests out as JSON
    arrays, the agent's lines in."""

    def __init__(self, sock: socket.socket, guest: QemuGuest) -> None:
        self.sock = sock
        self.guest = guest
        self._buf = b""
        #: Set once the agent's ``serve_ready`` frame has been read.
        self.agent_version: str | None = None

    def send(self, obj: Any) -> None:
        try:
            self.sock.sendall(json.dumps(obj).encode() + b"\n")
        except OSError as exc:
            raise TargetError(f"guest channel broke: {exc}") from None

    def readline(self, deadline: float) -> str | None:
        """The next line from the agent, or None at the deadline. EOF -> TargetError."""
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.sock], [], [], min(left, 1.0))
            if not ready:
                if not self.guest.running():
                    proc = self.guest.proc
                    raise TargetError(
                        f"guest stopped (QEMU exit {proc.returncode if proc else '?'}); "
                        f"console: {self.guest.console_tail()}"
                    )
                continue
            chunk = self.sock.recv(65536)
            if not chunk:
                raise TargetError(
                    f"guest closed the agent channel; console: {self.guest.console_tail()}"
                )
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode("utf-8", "replace").rstrip("\r")

    def wait_ready(self, deadline: float) -> bool:
        """Read up to the agent's ``serve_ready`` frame; False at the deadline."""
        while self.agent_version is None:
            line = self.readline(deadline)
            if line is None:
                return False
            frame = _frame(line)
            if frame and frame.get("type") == "serve_ready":
                self.agent_version = str(frame.get("agent_version") or "?")
        return True

    def request(self, args: list[str], deadline: float) -> Iterator[str | dict[str, Any]]:
        """Send one request; yield the agent's contract lines, then its ``serve_done`` frame.
        Returns without the frame at the deadline."""
        self.send([str(a) for a in args])
        while True:
            line = self.readline(deadline)
            if line is None:
                return
            frame = _frame(line)
            if frame is None:
                yield line
            elif frame.get("type") == "serve_done":
                yield frame
                return

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


@dataclass(eq=False)
class QemuGuest:
    """One running QEMU process and its temporary directory."""

    image: Image
    spec: GuestSpec
    agent_args: list[str] | None = None
    proc: subprocess.Popen[bytes] | None = None
    workdir: Path | None = None
    argv: list[str] = field(default_factory=list)
    pinning: dict[int, int] = field(default_factory=dict)
    channel: AgentChannel | None = None
    #: The sockets of ``spec.host_ports``, by port name.
    host_channels: dict[str, AgentChannel] = field(default_factory=dict)
    #: The console's last lines, kept when stop() removes the directory.
    console_snapshot: str = ""
    #: Guest port -> this machine's loopback port, on a user network (``FORWARDED_PORTS``).
    forwards: dict[int, int] = field(default_factory=dict)
    #: The QEMU process itself; ``proc`` is the watchdog it runs under, which exits as it does.
    qemu_pid: int | None = None
    #: The write end of the watchdog's pipe: closed when this process exits, however.
    _lifeline: int | None = None

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Start QEMU paused, pin its vCPU threads, connect the channel, then let it run."""
        self.workdir = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
        write_owner(self.workdir)  # so that `vmtax doctor` can tell a leftover
        if self.spec.network == "user":
            self.forwards = {port: free_port() for port in FORWARDED_PORTS}
        self.argv = qemu_argv(
            self.image,
            self.spec,
            self.workdir,
            agent_args=self.agent_args,
            forwards=self.forwards,
        )
        if self.spec.scratch_mb:
            # Sparse: costs host disk only for what the guest writes; removed with workdir.
            with (self.workdir / "scratch.img").open("wb") as fh:
                fh.truncate(self.spec.scratch_mb << 20)
        with _live_lock:
            _live.add(self)
        try:
            self._spawn()
            qmp = self._monitor()
            try:
                if self.spec.pin:
                    self._pin(qmp)
                if self.agent_args is None:
                    # Every port is connected before the guest runs, so that no agent or
                    # relay inside ever sees its port without a host side.
                    self.channel = self._connect("vmtax.sock")
                    for name in self.spec.host_ports:
                        self.host_channels[name] = self._connect(f"host-{name}.sock")
                qmp.cmd("cont")
            finally:
                qmp.close()
        except (OSError, QMPError) as exc:
            # QEMU died while starting (bad accelerator, CPU model ...): say what it printed.
            code = None
            if self.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = self.proc.wait(timeout=2)
            tail = self.console_tail(2)
            self.stop()
            raise QemuStartError(
                f"QEMU failed to start ({type(exc).__name__}: {exc}; exit {code}): {tail}", tail
            ) from None
        except BaseException:
            self.stop()
            raise

    def _spawn(self) -> None:
        """Start QEMU under the agent's watchdog, which holds the read end of a pipe whose
        only write end is ours: when this process ends, however (SIGKILL included), the
        watchdog reads EOF, kills QEMU and removes the directory. os.pipe() fds are not
        inherited, so no other child holds the write end. The watchdog is the agent's, not a
        Python module: on a loaded two-core machine it had QEMU started in 20 ms, where
        Python took 340 ms to start at all, and it keeps 2.4 MiB resident against Python's
        11 MiB, which would count inside a sweep's memory cap beside every guest."""
        assert self.workdir is not None
        lifeline_r, self._lifeline = os.pipe()
        watchdog = [str(find_agent()), "watchdog", "--fd", str(lifeline_r),
                    "--dir", str(self.workdir), "--", *self.argv]  # fmt: skip
        try:
            with (self.workdir / "qemu.stderr").open("wb") as err:
                self.proc = subprocess.Popen(
                    watchdog,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,  # QEMU's pid, one line
                    stderr=err,
                    pass_fds=(lifeline_r,),
                    start_new_session=True,  # its own process group: one killpg stops it all
                )
        finally:
            os.close(lifeline_r)
        assert self.proc.stdout is not None
        with self.proc.stdout:
            line = self.proc.stdout.readline().strip()
        if not line.isdigit():
            raise OSError(f"the watchdog started no QEMU (it printed {line[:80]!r})")
        self.qemu_pid = int(line)

    def _connect(self, sock_name: str) -> AgentChannel:
        assert self.workdir is not None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.workdir / sock_name))
        except OSError:
            sock.close()
            raise
        return AgentChannel(sock, self)

    def _monitor(self) -> QEMUMonitorProtocol:
        """Connect to QMP. The socket file appears at bind(), a moment before QEMU listens,
        so a refused connection is retried while QEMU is alive."""
        assert self.proc is not None and self.workdir is not None
        path = self.workdir / "qmp.sock"
        _wait_for(path, self.proc, 30)
        deadline = time.monotonic() + 30
        while True:
            qmp = QEMUMonitorProtocol(str(path))
            try:
                qmp.connect()
                return qmp
            except (OSError, QMPError):
                qmp.close()
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _pin(self, qmp: QEMUMonitorProtocol) -> None:
        # One host CPU per vCPU thread, wrapping around when the guest has more vCPUs.
        host_cpus = sorted(os.sched_getaffinity(0))
        cpus = qmp.cmd("query-cpus-fast")
        if not isinstance(cpus, list):
            raise TargetError(f"QMP query-cpus-fast returned {cpus!r}, not a list of CPUs")
        for cpu in cpus:
            index, tid = int(cpu["cpu-index"]), int(cpu["thread-id"])
            host = host_cpus[index % len(host_cpus)]
            os.sched_setaffinity(tid, {host})
            self.pinning[index] = host

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Kill QEMU's process group and remove the temporary directory. Idempotent."""
        for channel in [self.channel, *self.host_channels.values()]:
            if channel is not None:
                channel.close()
        self.channel = None
        self.host_channels = {}
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        if self.workdir is not None:
            self.console_snapshot = self.console_tail()
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        if self._lifeline is not None:
            # Only now: the watchdog is gone, and the directory with it.
            os.close(self._lifeline)
            self._lifeline = None
        with _live_lock:
            _live.discard(self)

    def wait_exit(self, timeout: float) -> int:
        """Wait for the guest to power off; kill it at ``timeout``."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AgentTimeout(
                f"guest did not power off within {timeout:g} s; console: {self.console_snapshot}"
            ) from None

    # -- diagnostics ------------------------------------------------------------------------
    def console_text(self) -> str:
        if self.workdir is None:
            return ""
        with contextlib.suppress(OSError):
            return (self.workdir / "console.log").read_text("utf-8", "replace")
        return ""

    def console_tail(self, lines: int = 3) -> str:
        """The last console lines (and QEMU's own stderr) in one line, for error messages."""
        text = self.console_text()
        if self.workdir is not None:
            with contextlib.suppress(OSError):
                text += (self.workdir / "qemu.stderr").read_text("utf-8", "replace")
        tail = [ln.strip() for ln in text.replace("\r", "\n").splitlines() if ln.strip()]
        return " | ".join(tail[-lines:]) or "(empty)"

    # -- channel ------------------------------------------------------------------------
    def send(self, obj: Any) -> None:
        if self.channel is None:
            raise TargetError("guest channel is closed")
        self.channel.send(obj)

    def readline(self, deadline: float) -> str | None:
        """The next line from the agent, or None at the deadline. EOF -> TargetError."""
        assert self.channel is not None
        return self.channel.readline(deadline)


def _drop_lifelines() -> None:
    # A child forked without exec (multiprocessing) must not hold the write ends: a guest
    # would then outlive its controller as long as that child lives.
    for guest in list(_live):
        if guest._lifeline is not None:
            with contextlib.suppress(OSError):
                os.close(guest._lifeline)


os.register_at_fork(after_in_child=_drop_lifelines)


@atexit.register
def _stop_all() -> None:
    with _live_lock:
        guests = list(_live)
    for guest in guests:
        guest.stop()


def _frame(line: str) -> dict[str, Any] | None:
    """A serve transport frame (``serve_ready`` / ``serve_done``), or None for contract lines.

    The whole line is searched: agents built before the frames put ``type`` first sorted
    their keys, which put ``type`` after a stderr tail of any length."""
    if '"serve_' not in line:
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        # A garbled frame still ends the request; its kind is in the first bytes.
        for kind in ("serve_done", "serve_ready"):
            if line.replace(" ", "").startswith(f'{{"type":"{kind}"'):
                return {"type": kind}
        return None
    if isinstance(obj, dict) and str(obj.get("type", "")).startswith("serve_"):
        return obj
    return None


#: What a nested level prints when it cannot run KVM (see guest/init-nested).
_KVM_BLOCKER = re.compile(r"vmtax-init: (L\d+): nested KVM unavailable: ([^\r\n]*)")

#: The guest kernel's watchdog: a CPU that has not scheduled for N seconds.
_SOFT_LOCKUP = re.compile(r"soft lockup - CPU#(\d+) stuck for (\d+)s! \[([^\]\r\n]*)\]")
#: Stuck this long, a CPU is hung, not slow: the watchdog first speaks at about 22 s, and a
#: vCPU thread the host merely starved catches up well before this.
HUNG_AFTER_SECONDS = 60
#: Boots of one prepare() when the guest kernel hangs: a TCG L1 running L2 under its own
#: KVM on emulated SVM sometimes never returns from the inner guest on one CPU (L1's
#: watchdog then reports its QEMU stuck for good), and a fresh boot does not.
BOOT_ATTEMPTS = 2
#: A nested stack whose next level has not come up for this share of the boot timeout is
#: hung too (except on the last boot, which waits it out): L2 under L1's KVM was once stuck
#: for good with both of L1's CPUs busy and nothing on the console, while L2 is up 25-190 s
#: after L1 (quiet to load average 20).
STALL_SHARE = 0.2


class GuestHung(TargetError):
    """The guest's kernel reported a CPU stuck for good while it booted."""

    def __init__(self, target: str, hang: str, console: str) -> None:
        super().__init__(f"{target}: the guest kernel hung at boot: {hang}")
        self.hang = hang
        self.console = console


def kernel_hang(console: str) -> str | None:
    """What the console says is hung ("CPU#1 stuck for 76 s in qemu-system-x86"), or None
    while no CPU has been stuck for ``HUNG_AFTER_SECONDS``."""
    for match in reversed(list(_SOFT_LOCKUP.finditer(console))):
        if int(match[2]) >= HUNG_AFTER_SECONDS:
            return f"CPU#{match[1]} stuck for {match[2]} s in {match[3]}"
    return None


class QemuTarget(Target):
    """The agent as PID 1 of a QEMU guest vmtax boots: at L1 from the minimal image; at
    L2/L3 from a nested image whose guest boots the inner levels (``inner`` sizes) itself,
    under TCG or, with ``inner_accel="kvm"``, under the KVM of the level above it.

    With ``inner_accel="kvm"`` every hypervisor level inside (L1, and L2 for an L3 target)
    also runs a second agent as root with tracefs mounted, on a port of its own; see
    ``host_sides()``."""

    def __init__(
        self,
        level: str,
        spec: GuestSpec,
        *,
        image: Image | None = None,
        boot_timeout: float = DEFAULT_BOOT_TIMEOUT,
        labels: dict[str, str] | None = None,
        provenance: dict[str, Any] | None = None,
        inner: list[tuple[int, int]] | None = None,
        inner_accel: str = "tcg",
        contents: ImageContents = AGENT_ONLY,
    ) -> None:
        """``contents``: what the guest's image carries besides the agent (when ``image``
        is not given), e.g. the workloads' servers."""
        self.level = level
        self.contents = contents
        #: (vCPUs, MiB) of each level inside this guest, outermost first.
        self.inner = list(inner or [])
        self.inner_accel = inner_accel
        if self.inner:
            sizes = ",".join(f"{c}x{m}" for c, m in self.inner)
            append = [f"vmtax_sizes={sizes}"]
            if inner_accel == "kvm":
                # Port vmtax-host is L1's own agent; vmtax-host.N goes N levels further in.
                ports = ("vmtax-host", *(f"vmtax-host.{n}" for n in range(1, len(self.inner))))
                append += ["vmtax_accel=kvm", "vmtax_level=1"]
                spec = replace(spec, host_ports=(*spec.host_ports, *ports))
            spec = replace(spec, extra_append=(*spec.extra_append, *append))
        self.name = f"qemu-{level}"
        self.spec = spec
        self.image = image
        self.boot_timeout = boot_timeout
        self._labels = dict(labels or {})
        self._provenance = dict(provenance or {})
        self.guest: QemuGuest | None = None
        self.agent_version: str | None = None
        self.boot_seconds: float | None = None
        #: Seconds from power-on until each level's agent was ready (host sides included).
        self.boot_seconds_by_level: dict[str, float] = {}
        #: Boots of the last prepare() whose kernel hung, and how ("boot 1: CPU#1 ...").
        self.boot_hangs: list[str] = []
        #: Set by cancel(): no guest is booted any more (an interrupted run's other levels
        #: were each waiting to boot theirs, and did so after the interrupt).
        self._cancelled = threading.Event()

    def capabilities(self) -> Capabilities:
        return Capabilities(network=self.spec.network, forwards=self._forwards,
                            vm_pid=self._qemu_pid)  # fmt: skip

    def _qemu_pid(self) -> int | None:
        return self.guest.qemu_pid if self.guest is not None else None

    @contextlib.contextmanager
    def place_server(self, spec: ServerSpec) -> Iterator[PlacedServer]:
        """The server's files are in the guest's image (``spec.guest_files``): the agent
        there starts it on its fixed port for the run and stops it after."""
        spot = Spot(spec.guest_dir, spec.guest_port, "root")  # a guest has no other user
        params = {"server": " ".join(spec.command(spot))} if spec.command else {}
        scratch = spec.guest_scratch or spec.guest_dir
        yield PlacedServer(spec.guest_port, spec.guest_dir, scratch, agent_params=params)

    def host_end(self, what: str) -> HostEnd:
        self._user_network(what)
        return HostEnd("127.0.0.1", HOST_FROM_GUEST)  # QEMU relays 10.0.2.2 to the loopback

    def listeners(self, count: int, what: str) -> list[Listener]:
        """Ports the guest's user network forwards; the guest is booted first (its
        forwards are chosen at boot)."""
        self._user_network(what)
        if count > len(FORWARDED_PORTS):
            raise ServerError(
                f"{what} needs {count} ports in {self.name}; its network forwards "
                f"{len(FORWARDED_PORTS)}"
            )
        forwards = self._forwards()
        return [
            Listener(f"0.0.0.0:{port}", f"127.0.0.1:{forwards[port]}")
            for port in FORWARDED_PORTS[:count]
        ]

    def _user_network(self, what: str) -> None:
        if self.spec.network != "user":
            raise ServerError(
                f"{self.name} has no network device for {what}: run with --guest-net user"
            )

    def _forwards(self) -> dict[int, int]:
        self.prepare()  # a guest's forwards are chosen at boot
        assert self.guest is not None
        return dict(self.guest.forwards)

    def resolve_image(self) -> Image:
        """The image this guest boots: the one given, else built (or found in the cache)
        from the agent, the levels inside and ``contents``."""
        if self.image is None:
            self.image = build_nested(
                find_agent(),
                1 + len(self.inner),
                inner_accel=self.inner_accel,
                contents=self.contents,
            )
        return self.image

    def prepare(self) -> None:
        self._refuse_if_cancelled()
        if self.guest is not None and self.guest.running():
            return
        died = self.guest.proc if self.guest is not None else None
        self.close()
        if died is not None:
            # The guest stopped by itself since the last run (killed, crashed, powered off):
            # that is said, as the request it breaks would be, and the next run boots anew.
            code = died.returncode
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
            raise TargetError(
                f"{self.name}: the guest stopped between runs (QEMU {how}); "
                "a new one boots for the next run"
            )
        self.resolve_image()
        self.boot_hangs = []
        for attempt in range(1, BOOT_ATTEMPTS + 1):
            self._refuse_if_cancelled()
            try:
                self._boot(stall_after=None if attempt == BOOT_ATTEMPTS else self._stall_after())
                return
            except GuestHung as exc:
                # Said in the provenance of every run on this guest, and in the error if
                # the last boot hangs too.
                self.boot_hangs.append(f"boot {attempt}: {exc.hang}")
                if attempt == BOOT_ATTEMPTS:
                    raise TargetError(
                        f"{self.name}: the guest kernel hung at each of {attempt} boots "
                        f"({'; '.join(self.boot_hangs)}); console: {exc.console}"
                    ) from None

    def reboot(self) -> None:
        """Power the guest off and boot a fresh one: what a boot fixes (memory placement,
        the host pages behind it, the vCPU threads' placement) is drawn anew."""
        self.close()
        self.prepare()

    def _refuse_if_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise TargetError(f"{self.name}: stopped (interrupted); no guest is booted")

    def cancel(self) -> None:
        self._cancelled.set()
        self.close()

    def _stall_after(self) -> float | None:
        """Seconds a nested stack may go without a level coming up, or None when it cannot
        tell (only host-side agents, one per hypervisor level, say that a level is up)."""
        return STALL_SHARE * self.boot_timeout if self._host_levels() else None

    def _boot(self, stall_after: float | None = None) -> None:
        """Boot one guest and wait for its agent; GuestHung when its kernel hangs, or when
        no level comes up for ``stall_after`` seconds."""
        assert self.image is not None
        guest = QemuGuest(self.image, self.spec)
        t0 = time.monotonic()
        guest.start()
        self.guest = guest
        assert guest.channel is not None
        try:
            if not self._wait_ready(guest, t0, stall_after):
                raise AgentTimeout(
                    f"{self.name}: agent not ready within {self.boot_timeout:g} s of boot; "
                    f"console: {guest.console_tail()}"
                )
            self.agent_version = guest.channel.agent_version
        except GuestHung:
            self.close()
            raise
        except TargetError as exc:
            blocker = _KVM_BLOCKER.search(guest.console_text())
            self.close()
            if blocker:
                raise TargetError(
                    f"{self.name}: nested KVM unavailable in {blocker[1]}: {blocker[2].strip()}"
                ) from None
            raise exc from None
        except BaseException:
            self.close()
            raise
        self.boot_seconds = time.monotonic() - t0

    def _wait_ready(self, guest: QemuGuest, t0: float, stall_after: float | None = None) -> bool:
        """Wait for the measured agent's ``serve_ready``; on the way, note when each host
        side's agent got ready (``boot_seconds_by_level``: when that level had booted)."""
        assert guest.channel is not None
        deadline = t0 + self.boot_timeout
        levels = self._host_levels()
        pending = {port: ch for port, ch in guest.host_channels.items() if port in levels}
        self.boot_seconds_by_level = {}
        progress = t0  # when the last level came up
        while time.monotonic() < deadline:
            self._refuse_if_cancelled()
            for port, channel in list(pending.items()):
                if channel.wait_ready(time.monotonic() + 0.05):
                    progress = time.monotonic()
                    self.boot_seconds_by_level[levels[port]] = round(progress - t0, 3)
                    del pending[port]
            if stall_after is not None and time.monotonic() - progress > stall_after:
                up = ", ".join(f"{lv} {s:.0f} s" for lv, s in self.boot_seconds_by_level.items())
                raise GuestHung(
                    self.name,
                    f"no level came up for {stall_after:.0f} s (up after: {up or 'none'})",
                    guest.console_tail(),
                )
            step = time.monotonic() + (0.2 if pending else 5.0)
            if guest.channel.wait_ready(min(deadline, step)):
                self.boot_seconds_by_level[self.level] = round(time.monotonic() - t0, 3)
                return True
            hang = kernel_hang(guest.console_text())
            if hang is not None:
                raise GuestHung(self.name, hang, guest.console_tail())
        return False

    def _host_levels(self) -> dict[str, str]:
        """Host-side port -> the level whose agent serves it."""
        out = {}
        for port in self.spec.host_ports:
            if port == "vmtax-host":
                out[port] = "L1"
            elif port.startswith("vmtax-host."):
                out[port] = f"L{int(port.rsplit('.', 1)[1]) + 1}"
        return out

    def run_agent(self, args: list[str], timeout: float) -> Iterator[str]:
        self.prepare()
        assert self.guest is not None and self.guest.channel is not None
        yield from self._serve(self.guest.channel, args, timeout, self)

    def _serve(
        self, channel: AgentChannel, args: list[str], timeout: float, caller: Target
    ) -> Iterator[str]:
        """One serve request on ``channel`` (``caller`` gets its ``last_stderr``); the
        guest goes when the agent does not answer in time (it cannot be interrupted over the
        channel) or the channel breaks."""
        deadline = time.monotonic() + timeout
        try:
            if not channel.wait_ready(deadline):
                raise AgentTimeout(f"{self.name}: agent on a port of the guest never got ready")
            for item in channel.request(args, deadline):
                if isinstance(item, dict):
                    caller.last_stderr = str(item.get("stderr_tail") or "")
                    return
                yield item
            tail = channel.guest.console_tail()
            self.close()
            raise AgentTimeout(
                f"{self.name}: agent did not finish within {timeout:g} s; guest killed; "
                f"console: {tail}"
            )
        except TargetError:
            self.close()
            raise

    def host_sides(self) -> dict[str, Target]:
        """The machines whose KVM runs this target's guests, by their level: where exits
        are counted. Each value is a Target whose ``run_agent(args, timeout)`` runs
        ``vmtax-probe ARGS`` as root on that level (tracefs at /sys/kernel/tracing).

        - an L1 guest under this machine's KVM: ``{"L0": LocalTarget}`` (this machine);
        - L2 under ``inner_accel="kvm"``: ``{"L1": ...}`` (L1's KVM runs L2);
        - L3 under ``inner_accel="kvm"``: ``{"L1": ..., "L2": ...}`` (L2's KVM runs L3 on
          L1's KVM, which sees L3's exits multiplied);
        - anything under TCG: ``{}`` (an emulator has no VM exits to count).

        The guest level ones share this target's guest (they boot it if needed and go with
        it); a request there can run while the measured agent runs, since each level's
        agent has its own port."""
        if self.spec.accel == "kvm" and not self.inner:
            return {"L0": LocalTarget(level="L0")}
        if self.inner_accel != "kvm" or not self.inner:
            return {}
        return {level: HostSide(self, port, level) for port, level in self._host_levels().items()}

    def labels(self) -> dict[str, str]:
        out = {
            "accel": self.spec.accel,
            "vcpus": str(self.spec.vcpus),
            "mem_mb": str(self.spec.memory_mb),
            **self._labels,
        }
        if self.spec.network:
            out["net"] = self.spec.network
        return out

    def provenance(self) -> dict[str, Any]:
        out: dict[str, Any] = {"target": self.name, **self._provenance}
        if self.image is not None:
            out.update(self.image.provenance())
        if self.guest is not None:
            out["qemu_argv"] = self.guest.argv
            if self.guest.forwards:
                out["forwards"] = {str(g): h for g, h in self.guest.forwards.items()}
            out["vcpu_pinning"] = {str(k): v for k, v in self.guest.pinning.items()}
        if self.inner:
            out["inner_levels"] = [
                {"vcpus": c, "memory_mb": m, "accel": self.inner_accel, "pinned": False}
                for c, m in self.inner
            ]
        if self.boot_seconds is not None:
            out["boot_seconds"] = round(self.boot_seconds, 3)
        if len(self.boot_seconds_by_level) > 1:
            out["boot_seconds_by_level"] = dict(self.boot_seconds_by_level)
        if self.boot_hangs:
            out["boot_hangs"] = list(self.boot_hangs)
        if self.agent_version:
            out["guest_agent_version"] = self.agent_version
        return out

    def environment(self) -> dict[str, Any]:
        """The QEMU that runs this guest: this machine's, at every level (a nested image
        carries the same binary)."""
        version = qemu_version()
        return {"qemu": {"version": version}} if version else {}

    def close(self) -> None:
        if self.guest is not None:
            guest, self.guest = self.guest, None
            if guest.running() and guest.channel is not None:
                # Ask for a clean power-off first; the kill in stop() is the fallback.
                with contextlib.suppress(TargetError):
                    guest.send(["poweroff"])
                with contextlib.suppress(subprocess.TimeoutExpired):
                    if guest.proc is not None:
                        guest.proc.wait(timeout=3)
            guest.stop()


class HostSide(Target):
    """The agent on a hypervisor level inside a QemuTarget's guest (L1, or L2 of an L3
    stack): root, not PID 1, serving its own virtio-serial port (``vmtax-host`` in that
    level). Same serve protocol as the measured agent (docs/contract.md)."""

    def __init__(self, owner: QemuTarget, port: str, level: str) -> None:
        self.owner = owner
        self.port = port
        self.level = level
        self.name = f"{owner.name}-host-{level}"

    def prepare(self) -> None:
        self.owner.prepare()

    def run_agent(self, args: list[str], timeout: float) -> Iterator[str]:
        self.prepare()
        guest = self.owner.guest
        assert guest is not None
        channel = guest.host_channels[self.port]
        yield from self.owner._serve(channel, args, timeout, self)

    def labels(self) -> dict[str, str]:
        return {"level": self.level}

    def provenance(self) -> dict[str, Any]:
        return {"target": self.name, "port": self.port, "guest_of": self.owner.name}

    def environment(self) -> dict[str, Any]:
        return self.owner.environment()


def run_oneshot(
    image: Image, spec: GuestSpec, agent_args: list[str], timeout: float
) -> tuple[list[str], str]:
    """Boot ``image`` with the agent as PID 1 running ``agent_args`` (kernel args after
    ``--``), wait for the power-off; return the agent's JSON lines and the whole console."""
    guest = QemuGuest(image, spec, agent_args=agent_args)
    guest.start()
    try:
        guest.wait_exit(timeout)
        text = guest.console_text()
    finally:
        guest.stop()
    lines = [ln.strip() for ln in text.replace("\r", "\n").splitlines()]
    return [ln for ln in lines if ln.startswith("{")], text
