"""What every target (local, ssh, qemu level) offers the runner.

A target knows how to start something and run the agent there. It knows nothing of
statistics or storage: it hands back the agent's stdout lines and the runner reads them with
``vmtax.contract.read_stream``.
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vmtax.errors import VmtaxError
from vmtax.targets.servers import HostEnd, Listener, PlacedServer, ServerError, ServerSpec

if TYPE_CHECKING:
    from vmtax.targets.fleet import Inventory


class TargetError(VmtaxError):
    """The target failed: unreachable, refused, crashed or timed out.

    Lines already yielded by ``run_agent`` stay valid; the runner keeps every whole run.
    """


class QemuStartError(TargetError):
    """QEMU died while starting a guest; ``qemu_said`` is its console and stderr tail."""

    def __init__(self, message: str, qemu_said: str) -> None:
        super().__init__(message)
        self.qemu_said = qemu_said


class AgentTimeout(TargetError):
    """The agent did not finish within its timeout and was killed."""


#: What a reader thread puts on a line queue when the agent's output has ended.
EOF_MARK = object()


def lines_until_eof(
    lines: queue.Queue[object], deadline: float, timeout_message: str
) -> Iterator[str]:
    """Yield what a reader thread puts on ``lines`` until it puts ``EOF_MARK``.

    An exception put on the queue is raised here; ``AgentTimeout(timeout_message)`` is raised
    once ``deadline`` (``time.monotonic()``) has passed.
    """
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AgentTimeout(timeout_message)
        try:
            item = lines.get(timeout=min(left, 1.0))
        except queue.Empty:
            continue
        if item is EOF_MARK:
            return
        if isinstance(item, BaseException):
            raise item
        yield str(item)


def free_port() -> int:
    """A TCP port free on this machine's loopback now (whoever binds it does so a moment
    later: a server a workload starts, QEMU's port forwards)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class InventoryEntry:
    """A host as an Ansible inventory lists it: the inventory Ansible is given and the
    host's variables there. Such a host runs only through Ansible (vmtax.fleet)."""

    inventory: Inventory
    hostvars: dict[str, Any]


@dataclass(frozen=True)
class Capabilities:
    """What a target offers besides running the agent, without anyone knowing its class.
    Each callable is None where the target cannot do it. Where a workload's server runs and
    how its ends reach each other is the target's own business: ``Target.place_server``,
    ``Target.host_end`` and ``Target.listeners``."""

    #: A TCP port free on the target's loopback now.
    free_port: Callable[[], int] | None = None
    #: A fresh directory on the target (its path), and removing it again.
    make_scratch: Callable[[str], str] | None = None
    remove_scratch: Callable[[str], None] | None = None
    #: Write files (name -> bytes) into a directory on the target.
    put_files: Callable[[str, dict[str, bytes]], None] | None = None
    #: (this machine's address as the target sees it, the target's address from here).
    link_addresses: Callable[[], tuple[str, str]] | None = None
    #: A guest's network: "user" when it has a NIC on QEMU's user network, else "".
    network: str = ""
    #: A guest's forwarded ports (port inside -> port on this machine's loopback); boots it.
    forwards: Callable[[], dict[int, int]] | None = None
    #: The inventory entry of a host that Ansible runs, the whole inventory at once.
    ansible: InventoryEntry | None = None
    #: The pid on this machine of a booted guest's virtual machine (its QEMU), else None.
    vm_pid: Callable[[], int | None] | None = None


def vm_pid(target: Target) -> int | None:
    """The pid of ``target``'s virtual machine on this machine, if it is a booted guest."""
    pid = target.capabilities().vm_pid
    return pid() if pid is not None else None


def agent_free_port(target: Target) -> int:
    """A TCP port free on ``target``'s loopback now, as its agent finds it."""
    lines = list(target.run_agent(["free-port"], 30.0))
    if not lines or not lines[0].strip().isdigit():
        why = target.last_stderr.strip().splitlines()[-1:] or ["no port printed"]
        raise TargetError(f"{target.name}: cannot find a free port: {why[0]}")
    return int(lines[0])


class Target(ABC):
    """A place where the agent runs: this machine, an SSH host, a QEMU guest at some level."""

    #: A short name for tables and logs, e.g. ``local``, ``ssh://bench@host``, ``qemu-L1``.
    name: str
    #: The level vmtax put the agent at: ``L0`` (no hypervisor vmtax added) .. ``L3``.
    level: str

    def __enter__(self) -> Target:
        self.prepare()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def prepare(self) -> None:
        """Start or connect, copy the agent if needed. Idempotent."""

    @abstractmethod
    def run_agent(self, args: list[str], timeout: float) -> Iterator[str]:
        """Run ``vmtax-probe ARGS`` and yield its stdout lines as they arrive.

        Raises ``AgentTimeout`` after ``timeout`` seconds (the agent is killed first) and
        ``TargetError`` when the agent cannot be started or the target goes away.
        A non-zero exit of the agent is not an error here: the stream's ``end`` record or
        its absence tells the caller what happened. ``last_stderr`` keeps the tail of the
        agent's stderr for error messages.
        """

    def labels(self) -> dict[str, str]:
        """What this target adds to the configuration: accel, vcpus, memory, host, ..."""
        return {}

    def capabilities(self) -> Capabilities:
        """What a workload may do here besides running the agent (see ``Capabilities``)."""
        return Capabilities()

    def place_server(self, spec: ServerSpec) -> AbstractContextManager[PlacedServer]:
        """Start (or prepare) ``spec``'s server here for one run and say how to reach it;
        leaving the context stops it and removes its files. Only targets that can hold a
        server override this: elsewhere it is refused in one line."""
        raise ServerError(
            f"cannot start {spec.name} on {self.name}: a server runs on this machine (L0), "
            "in vmtax's guests and on SSH hosts"
        )

    def host_end(self, what: str) -> HostEnd:
        """Where this machine listens for ``what`` so that the target reaches it."""
        raise ServerError(self._no_link(what))

    def listeners(self, count: int, what: str) -> list[Listener]:
        """``count`` ports the target can listen on that this machine can connect to."""
        raise ServerError(self._no_link(what))

    def _no_link(self, what: str) -> str:
        return (
            f"{what} spans this machine and {self.name}, which is neither this machine, "
            "one of vmtax's guests nor an SSH host: give host= and port= of a netserver it "
            "can reach"
        )

    def provenance(self) -> dict[str, Any]:
        """How the target was built (QEMU command line, image hash, ssh host key ...)."""
        return {}

    def environment(self) -> dict[str, Any]:
        """Fingerprint fields only this controller knows, which the agent's own fingerprint
        of the target gets (``targets.agent.fingerprint``): a guest's ``qemu``. Nothing for
        a target that is a whole machine (this one, an SSH host)."""
        return {}

    last_stderr: str = ""

    def reboot(self) -> None:  # noqa: B027 - optional hook, only guests vmtax boots have one
        """Start a new boot for the runs that follow. Only a guest vmtax boots can: this
        machine and SSH hosts have one boot, so here it does nothing."""

    def close(self) -> None:  # noqa: B027 - optional hook, most targets have nothing to free
        """Stop everything this target started and remove its temporary files."""

    def cancel(self) -> None:
        """Stop for good (Ctrl-C, SIGTERM): close, and let no later call start anything.
        Targets that start nothing in ``prepare()`` need no more than ``close()``."""
        self.close()


def find_agent(explicit: str | None = None) -> Path:
    """Locate the ``vmtax-probe`` binary: an explicit path, ``$VMTAX_PROBE``, the scripts
    directory beside this Python (where ``pip install .`` put it with this vmtax), or PATH.

    A binary the user named (argument or ``$VMTAX_PROBE``) is never swapped for another one
    found elsewhere: if it is missing, that is the error. The installed one comes before
    PATH: it matches this controller, and PATH may hold a version manager's shim (pyenv's
    is a shell script costing about 0.2 s per call, which every run would pay).
    """
    asked = explicit or os.environ.get("VMTAX_PROBE")
    if asked:
        if Path(asked).is_file() and os.access(asked, os.X_OK):
            return Path(asked).resolve()
        raise TargetError(f"agent binary not found or not executable: {asked}")
    for cand in (str(Path(sys.executable).parent / "vmtax-probe"), shutil.which("vmtax-probe")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return Path(cand).resolve()
    raise TargetError(
        "agent binary vmtax-probe not found on PATH; reinstall with `pip install .` "
        "or set VMTAX_PROBE"
    )
