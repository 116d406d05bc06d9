"""QEMU guests vmtax boots itself: the process, its QMP monitor, vCPU pinning and the
virtio-serial channel to the agent, which runs as PID 1 inside the guest.

Every guest lives in its own process group and temporary directory. ``stop()`` kills the
group and removes the directory; it runs on success, error, timeout, Ctrl-C (``finally``)
and at interpreter exit (``atexit``), so no QEMU process or socket is left behind.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
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

from vmtax.targets.base import AgentTimeout, Target, TargetError, find_agent
from vmtax.targets.images import Image, build_nested

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


def qemu_binary() -> str:
    path = shutil.which(QEMU)
    if not path:
        raise TargetError(f"{QEMU} not found: install qemu-system-x86")
    return path


def qemu_argv(
    image: Image,
    spec: GuestSpec,
    workdir: Path,
    *,
    agent_args: list[str] | None = None,
    paused: bool = True,
) -> list[str]:
    """The full QEMU command line. ``agent_args`` runs the agent one-shot instead of serving."""
    append = ["console=ttyS0", "quiet", "panic=-1", *spec.extra_append]
    if agent_args:
        append += ["--", *agent_args]
    argv = [
        qemu_binary(),
        "-name",
        "vmtax-guest",
        "-nodefaults",
        "-no-user-config",
        "-machine",
        f"q35,accel={spec.accel}",
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
        str(image.kernel),
        "-initrd",
        str(image.initrd),
        "-append",
        " ".join(append),
        "-qmp",
        f"unix:{workdir / 'qmp.sock'},server=on,wait=off",
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
    if spec.scratch_mb:
        argv += [
            "-drive",
            f"file={workdir / 'scratch.img'},format=raw,if=none,id=scratch",
            "-device",
            "virtio-blk-pci,drive=scratch",
        ]
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
    channel: socket.socket | None = None
    #: The console's last lines, kept when stop() removes the directory.
    console_snapshot: str = ""
    _buf: bytes = b""

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Start QEMU paused, pin its vCPU threads, connect the channel, then let it run."""
        self.workdir = Path(tempfile.mkdtemp(prefix="vmtax-qemu-"))
        self.argv = qemu_argv(self.image, self.spec, self.workdir, agent_args=self.agent_args)
        if self.spec.scratch_mb:
            # Sparse: costs host disk only for what the guest writes; removed with workdir.
            with (self.workdir / "scratch.img").open("wb") as fh:
                fh.truncate(self.spec.scratch_mb << 20)
        with _live_lock:
            _live.add(self)
        try:
            with (self.workdir / "qemu.stderr").open("wb") as err:
                self.proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    start_new_session=True,  # its own process group: one killpg stops it all
                )
            qmp = self._monitor()
            try:
                if self.spec.pin:
                    self._pin(qmp)
                if self.agent_args is None:
                    self.channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    self.channel.connect(str(self.workdir / "vmtax.sock"))
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
            raise TargetError(
                f"QEMU failed to start ({type(exc).__name__}: {exc}; exit {code}): {tail}"
            ) from None
        except BaseException:
            self.stop()
            raise

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
        for cpu in qmp.cmd("query-cpus-fast"):
            index, tid = int(cpu["cpu-index"]), int(cpu["thread-id"])
            host = host_cpus[index % len(host_cpus)]
            os.sched_setaffinity(tid, {host})
            self.pinning[index] = host

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Kill QEMU's process group and remove the temporary directory. Idempotent."""
        if self.channel is not None:
            with contextlib.suppress(OSError):
                self.channel.close()
            self.channel = None
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

    # -- channel ----------------------------------------------------------------------------
    def send(self, obj: Any) -> None:
        if self.channel is None:
            raise TargetError("guest channel is closed")
        try:
            self.channel.sendall(json.dumps(obj).encode() + b"\n")
        except OSError as exc:
            raise TargetError(f"guest channel broke: {exc}") from None

    def readline(self, deadline: float) -> str | None:
        """The next line from the agent, or None at the deadline. EOF -> TargetError."""
        assert self.channel is not None
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.channel], [], [], min(left, 1.0))
            if not ready:
                if not self.running():
                    raise TargetError(
                        f"guest stopped (QEMU exit {self.proc.returncode if self.proc else '?'}); "
                        f"console: {self.console_tail()}"
                    )
                continue
            chunk = self.channel.recv(65536)
            if not chunk:
                raise TargetError(f"guest closed the agent channel; console: {self.console_tail()}")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode("utf-8", "replace").rstrip("\r")


@atexit.register
def _stop_all() -> None:
    with _live_lock:
        guests = list(_live)
    for guest in guests:
        guest.stop()


def _frame(line: str) -> dict[str, Any] | None:
    """A serve transport frame (``serve_ready`` / ``serve_done``), or None for contract lines."""
    if '"serve_' not in line[:48]:
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


class QemuTarget(Target):
    """The agent as PID 1 of a QEMU guest vmtax boots: at L1 from the minimal image; at
    L2/L3 from a nested image whose guest boots the inner levels (``inner`` sizes) itself."""

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
    ) -> None:
        self.level = level
        #: (vCPUs, MiB) of each level inside this guest, outermost first.
        self.inner = list(inner or [])
        if self.inner:
            sizes = ",".join(f"{c}x{m}" for c, m in self.inner)
            spec = replace(spec, extra_append=(*spec.extra_append, f"vmtax_sizes={sizes}"))
        self.name = f"qemu-{level}"
        self.spec = spec
        self.image = image
        self.boot_timeout = boot_timeout
        self._labels = dict(labels or {})
        self._provenance = dict(provenance or {})
        self.guest: QemuGuest | None = None
        self.agent_version: str | None = None
        self.boot_seconds: float | None = None

    def prepare(self) -> None:
        if self.guest is not None and self.guest.running():
            return
        self.close()
        if self.image is None:
            self.image = build_nested(find_agent(), 1 + len(self.inner))
        guest = QemuGuest(self.image, self.spec)
        t0 = time.monotonic()
        guest.start()
        self.guest = guest
        try:
            deadline = t0 + self.boot_timeout
            while True:
                line = guest.readline(deadline)
                if line is None:
                    raise AgentTimeout(
                        f"{self.name}: agent not ready within {self.boot_timeout:g} s of boot; "
                        f"console: {guest.console_tail()}"
                    )
                frame = _frame(line)
                if frame and frame.get("type") == "serve_ready":
                    self.agent_version = frame.get("agent_version")
                    break
        except BaseException:
            self.close()
            raise
        self.boot_seconds = time.monotonic() - t0

    def run_agent(self, args: list[str], timeout: float) -> Iterator[str]:
        self.prepare()
        guest = self.guest
        assert guest is not None
        guest.send([str(a) for a in args])
        deadline = time.monotonic() + timeout
        try:
            while True:
                line = guest.readline(deadline)
                if line is None:
                    # The agent cannot be interrupted over the channel: the guest goes.
                    tail = guest.console_tail()
                    self.close()
                    raise AgentTimeout(
                        f"{self.name}: agent did not finish within {timeout:g} s; guest killed; "
                        f"console: {tail}"
                    )
                frame = _frame(line)
                if frame is None:
                    yield line
                elif frame.get("type") == "serve_done":
                    self.last_stderr = str(frame.get("stderr_tail") or "")
                    return
        except TargetError:
            self.close()
            raise

    def labels(self) -> dict[str, str]:
        return {
            "accel": self.spec.accel,
            "vcpus": str(self.spec.vcpus),
            "mem_mb": str(self.spec.memory_mb),
            **self._labels,
        }

    def provenance(self) -> dict[str, Any]:
        out: dict[str, Any] = {"target": self.name, **self._provenance}
        if self.image is not None:
            out.update(self.image.provenance())
        if self.guest is not None:
            out["qemu_argv"] = self.guest.argv
            out["vcpu_pinning"] = {str(k): v for k, v in self.guest.pinning.items()}
        if self.inner:
            out["inner_levels"] = [
                {"vcpus": c, "memory_mb": m, "accel": "tcg", "pinned": False} for c, m in self.inner
            ]
        if self.boot_seconds is not None:
            out["boot_seconds"] = round(self.boot_seconds, 3)
        if self.agent_version:
            out["guest_agent_version"] = self.agent_version
        return out

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
