"""LocalTarget: run the agent on this machine as a child process.

The agent runs in its own process group so a timeout kills it and anything it started. Its
stdout lines are yielded as they arrive (a reader thread feeds a queue, so the wait for the
next line can be bounded by the deadline); the tail of stderr is kept for error messages.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from vmtax.targets.base import (
    EOF_MARK,
    AgentTimeout,
    Capabilities,
    Target,
    TargetError,
    find_agent,
    free_port,
    lines_until_eof,
)
from vmtax.targets.servers import (
    HostEnd,
    Listener,
    PlacedServer,
    Server,
    ServerSpec,
    Spot,
    free_ports,
)

_STDERR_TAIL_LINES = 40


class LocalTarget(Target):
    """The machine vmtax runs on (level L0 unless told otherwise)."""

    def __init__(
        self, agent: str | Path | None = None, *, level: str = "L0", name: str = "local"
    ) -> None:
        self._agent_arg = str(agent) if agent else None
        self._agent: Path | None = None
        self.level = level
        self.name = name
        self.last_stderr = ""
        self._live: set[subprocess.Popen[bytes]] = set()
        self._live_lock = threading.Lock()

    @property
    def agent(self) -> Path:
        if self._agent is None:
            if self._agent_arg is not None:
                # An explicit binary is used as given, never swapped for one found elsewhere.
                path = Path(self._agent_arg)
                if not (path.is_file() and os.access(path, os.X_OK)):
                    raise TargetError(f"agent binary not found or not executable: {path}")
                self._agent = path
            else:
                self._agent = find_agent()
        return self._agent

    def prepare(self) -> None:
        # Resolving the binary is the only preparation; it raises TargetError if missing.
        _ = self.agent

    def capabilities(self) -> Capabilities:
        return Capabilities(free_port=free_port)

    @contextlib.contextmanager
    def place_server(self, spec: ServerSpec) -> Iterator[PlacedServer]:
        """The server started here, in a temporary directory as its own user, on a free
        loopback port; stopped and removed after."""
        with Server(spec.name, owner=spec.owner, stop_signal=spec.stop_signal) as srv:
            if spec.start_here is not None:
                port = spec.start_here(srv)
            else:
                port = free_port()
                srv.write_files(spec.files(str(srv.dir), port))
                if spec.command is not None:
                    user = srv.owner or spec.owner or "root"
                    srv.start(spec.command(Spot(str(srv.dir), port, user)), port=port)
            yield PlacedServer(port=port, directory=str(srv.dir), scratch=str(srv.dir), here=srv)

    def host_end(self, what: str) -> HostEnd:
        return HostEnd("127.0.0.1", "127.0.0.1")

    def listeners(self, count: int, what: str) -> list[Listener]:
        return [Listener(f"127.0.0.1:{p}", f"127.0.0.1:{p}") for p in free_ports(count, free_port)]

    def labels(self) -> dict[str, str]:
        return {}

    def provenance(self) -> dict[str, Any]:
        return {"kind": "local", "host": socket.gethostname(), "agent": str(self.agent)}

    def run_agent(self, args: list[str], timeout: float) -> Iterator[str]:
        try:
            proc = subprocess.Popen(
                [str(self.agent), *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # own process group: killpg reaches its children too
            )
        except OSError as exc:
            raise TargetError(f"cannot start agent {self.agent}: {exc.strerror or exc}") from None
        assert proc.stdout is not None and proc.stderr is not None
        with self._live_lock:
            self._live.add(proc)
        lines: queue.Queue[object] = queue.Queue()
        tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        readers = [
            threading.Thread(target=_pump, args=(proc.stdout, lines.put, True), daemon=True),
            threading.Thread(target=_pump, args=(proc.stderr, tail.append, False), daemon=True),
        ]
        for r in readers:
            r.start()
        deadline = time.monotonic() + timeout
        try:
            yield from lines_until_eof(
                lines,
                deadline,
                f"agent `{' '.join(args[:2])}` did not finish within {timeout:g} s and was killed",
            )
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            raise AgentTimeout(
                f"agent `{' '.join(args[:2])}` closed its output but did not exit "
                f"within {timeout:g} s"
            ) from None
        finally:
            # Also after a normal exit: a child the agent forked and left behind would
            # otherwise keep running and disturb the next measurement.
            _kill_group(proc)
            with self._live_lock:
                self._live.discard(proc)
            for r in readers:
                r.join(timeout=2)
            self.last_stderr = "".join(tail).strip()
            proc.stdout.close()
            proc.stderr.close()

    def close(self) -> None:
        """Kill any agent still running (Ctrl-C of the controller reaches it only this way:
        each agent has its own process group)."""
        with self._live_lock:
            live = list(self._live)
        for proc in live:
            _kill_group(proc)


def _pump(stream: IO[bytes], put: Any, mark_eof: bool) -> None:
    for raw in iter(stream.readline, b""):
        put(raw.decode("utf-8", "replace"))
    if mark_eof:
        put(EOF_MARK)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
