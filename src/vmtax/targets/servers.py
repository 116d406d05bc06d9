"""Servers a target places for a workload, and how the two ends of a workload reach each other.

A workload says what its server is (``ServerSpec``: the command, its files, the user it runs
as); the target decides where it runs and how the client reaches it (``Target.place_server``).
This machine starts it in a temporary directory and stops it after; a vmtax guest's agent
starts it from the files its image carries; an SSH host's agent starts it from files copied
into a scratch directory there. The workload only reads the ``PlacedServer``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vmtax.errors import VmtaxError

#: Temporary directories of servers are named with this prefix (the cleanup test looks for it).
TMP_PREFIX = "vmtax-wl-"


class ServerError(VmtaxError):
    """A server could not be placed or started: one line, ending the run, not the target."""


@dataclass(frozen=True)
class Spot:
    """Where a placed server runs: its directory (its files are there), its port, and the
    user it should switch to when started as root."""

    directory: str
    port: int
    user: str


def _no_files(directory: str, port: int) -> dict[str, bytes]:
    return {}


@dataclass(frozen=True)
class ServerSpec:
    """What a workload's server is, wherever it runs.

    ``command(spot)`` is its argument list; ``files(directory, port)`` the files it needs in
    its directory (relative paths: configuration, data, scripts); vmtax guests carry them
    in ``guest_dir`` and the server listens on ``guest_port`` there. ``command`` None: there
    is no long-running server to start, only the files (a script the client runs).
    ``start_here`` replaces ``command`` on this machine where starting needs more than one
    command (a data directory to copy first); it returns the port it listens on."""

    name: str
    command: Callable[[Spot], list[str]] | None = None
    files: Callable[[str, int], dict[str, bytes]] = _no_files
    #: The user it runs as on this machine when vmtax is root (its files are chowned to it).
    owner: str | None = None
    #: The user an SSH host's server switches to when started as root.
    remote_user: str = "nobody"
    stop_signal: int = signal.SIGTERM
    guest_dir: str = ""
    guest_port: int = 0
    #: Where a guest's server keeps its data (its scratch disk), if not in ``guest_dir``.
    guest_scratch: str = ""
    start_here: Callable[[Server], int] | None = None

    def guest_files(self) -> dict[str, bytes]:
        """Its files as a guest image carries them (paths without the leading /)."""
        where = self.guest_dir.strip("/")
        files = self.files(self.guest_dir, self.guest_port)
        return {f"{where}/{rel}": data for rel, data in files.items()}


@dataclass
class PlacedServer:
    """A server placed on a target: the port the target's agent reaches it on, the directory
    holding its files there, where it may keep data, and what the agent's probe is given so
    that it starts the server itself (``{"server": command}``) or nothing when it already runs.
    ``here`` is the running server when it is on this machine (tools run beside it)."""

    port: int
    directory: str
    scratch: str
    agent_params: dict[str, str] = field(default_factory=dict)
    here: Server | None = None


@dataclass(frozen=True)
class Listener:
    """A port the target listens on: where it binds, and how this machine connects to it."""

    bind: str
    from_host: str


@dataclass(frozen=True)
class HostEnd:
    """Where this machine's end of a workload listens, and the address the target connects
    to for it."""

    bind_ip: str
    seen_as: str


def hostport(ip: str, port: int) -> str:
    """``ip:port``, with an IPv6 address in brackets."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def free_ports(count: int, find: Callable[[], int]) -> list[int]:
    """``count`` distinct ports, each from ``find()``."""
    ports: list[int] = []
    while len(ports) < count:
        port = find()
        if port not in ports:
            ports.append(port)
    return ports


def wait_port(
    port: int, proc: subprocess.Popen[bytes], deadline: float, host: str = "127.0.0.1"
) -> bool:
    """True once something accepts on host:port; False if ``proc`` exits first."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection((host, port), 0.2):
            return True
        time.sleep(0.05)
    return False


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "(its log is empty)"


class Server:
    """A server process on this machine, in its own process group and temporary directory.

    ``start`` waits until it accepts on its port; if it exits or does not answer in time,
    ``ServerError`` quotes the last line of its log. ``stop`` (also on ``with`` exit)
    kills the group and removes the directory, so nothing is left behind.
    """

    def __init__(
        self, name: str, *, owner: str | None = None, stop_signal: int = signal.SIGTERM
    ) -> None:
        self.name = name
        self.stop_signal = stop_signal
        self.dir = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{name}-"))
        self.dir.chmod(0o755)
        self.owner = owner if os.geteuid() == 0 else None
        if self.owner:
            shutil.chown(self.dir, self.owner, self.owner)
        self.log = self.dir / "server.log"
        self.port = 0
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run(self, argv: list[str], what: str, timeout: float = 120.0) -> None:
        """Run a set-up command (initdb, install-db) to completion; errors quote its output."""
        try:
            res = subprocess.run(
                argv,
                capture_output=True,
                timeout=timeout,
                user=self.owner,
                cwd=self.dir,
                env=self.env(),
                check=False,
            )
        except FileNotFoundError:
            raise ServerError(f"{self.name}: {argv[0]} not found (install it)") from None
        except subprocess.TimeoutExpired:
            raise ServerError(f"{self.name}: {what} did not finish in {timeout:g} s") from None
        if res.returncode != 0:
            text = (res.stderr or res.stdout).decode("utf-8", "replace")
            raise ServerError(f"{self.name}: {what} failed: {last_line(text)}")

    def start(
        self, argv: list[str], *, port: int, timeout: float = 30.0, host: str = "127.0.0.1"
    ) -> None:
        """Start ``argv`` and wait until it accepts on ``host:port``."""
        self.port = port
        try:
            with self.log.open("ab") as log:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    user=self.owner,
                    cwd=self.dir,
                    env=self.env(),
                )
        except FileNotFoundError:
            raise ServerError(f"{self.name}: {argv[0]} not found (install it)") from None
        self.procs.append(proc)
        if not wait_port(port, proc, time.monotonic() + timeout, host):
            code = proc.poll()
            why = f"exited with code {code}" if code is not None else f"silent for {timeout:g} s"
            raise ServerError(f"{self.name} did not start ({why}): {last_line(self.log_text())}")

    def write_files(self, files: dict[str, bytes]) -> None:
        """Write ``files`` (relative paths) into the server's directory, owned by its user."""
        for rel, data in files.items():
            path = self.dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            if self.owner:
                shutil.chown(path, self.owner, self.owner)

    def env(self) -> dict[str, str]:
        """The server's environment: its scratch files go to its own directory (its user
        may not be able to write the controller's $TMPDIR)."""
        return {**os.environ, "TMPDIR": str(self.dir)}

    def log_text(self) -> str:
        try:
            return self.log.read_text("utf-8", "replace")
        except OSError:
            return ""

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, self.stop_signal)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        self.procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
