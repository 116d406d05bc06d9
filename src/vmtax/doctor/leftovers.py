"""Guests and scratch directories that an earlier vmtax left on this machine.

Every guest's scratch directory (``vmtax-qemu-*`` in the temporary directory) holds an owner
record, ``owner.json``: the controller's host, pid and the pid's start time. A guest dies
with its controller (the agent's ``watchdog`` kills it), so what is found here was left by a
vmtax from before that, or by a controller killed between making a directory and starting
its guest:

- a *guest*: a QEMU process whose command line names a scratch directory whose owner has
  ended; for a directory without an owner record (a vmtax before the records), a QEMU whose
  parent has exited (it was the controller's own child);
- a *scratch* directory with no guest, whose owner has ended (or, without a record, that
  nothing has touched for ``UNOWNED_AFTER_S``);
- a sweep's *memory* directory (``vmtax-sweep-ram-*`` in ``RAM_ROOT``: the files that back
  its guests' RAM under a memory cap) that no QEMU uses, by the same rule.

A controller on another host (a shared temporary directory) cannot be checked, so what it
owns is never counted.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The name every guest's scratch directory starts with.
SCRATCH_PREFIX = "vmtax-qemu-"
#: Where a sweep keeps the files behind its guests' RAM (on disk, not a tmpfs), and their
#: directory's name.
RAM_ROOT = Path("/var/tmp")  # noqa: S108 - mkdtemp makes a private directory in it
RAM_PREFIX = "vmtax-sweep-ram-"
OWNER_FILE = "owner.json"
#: A scratch directory without an owner record counts as left over once untouched this long
#: (a controller writes its record right after making the directory).
UNOWNED_AFTER_S = 60.0


def controller_identity() -> dict[str, Any]:
    """Who is running an experiment, so a later command can tell a live run from a dead one."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": pid_start(os.getpid())}


def controller_alive(ident: dict[str, Any] | None) -> bool | None:
    """True/False for a controller on this host; None when it ran elsewhere (cannot tell)."""
    if not ident or ident.get("host") != socket.gethostname():
        return None
    pid = int(ident.get("pid", 0))
    if pid <= 0:
        return False
    start = pid_start(pid)
    # A recycled pid has a different start time.
    return start is not None and start == ident.get("pid_start")


def pid_start(pid: int) -> int | None:
    """The process's start time in clock ticks after boot, or None when it does not exist."""
    stat = _stat(pid)
    return int(stat[19]) if stat else None


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The fields after the ")" that closes the command name: state is [0], ppid [1].
    return text.rsplit(")", 1)[1].split()


def write_owner(directory: Path) -> None:
    """Record this process as the owner of a scratch directory it has just made."""
    (directory / OWNER_FILE).write_text(json.dumps(controller_identity()))


def read_owner(directory: Path) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError):
        owner = json.loads((directory / OWNER_FILE).read_text())
        return owner if isinstance(owner, dict) else None
    return None


@dataclass(frozen=True)
class Leftover:
    """One thing an earlier vmtax left: a running guest (with its directory) or a directory."""

    kind: str  # "guest" | "scratch" | "sweep memory"
    directory: Path
    why: str
    pid: int | None = None  # the guest's QEMU
    started: int | None = None  # its start time, so a recycled pid is never killed
    size: str = ""

    def line(self) -> str:
        if self.kind == "guest":
            return f"QEMU pid {self.pid} ({self.size} resident) on {self.directory}: {self.why}"
        return f"{self.kind} directory {self.directory} ({self.size} on disk): {self.why}"


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:.0f} MiB" if n_bytes >= 2**20 else f"{n_bytes // 1024} KiB"


def _owner_why(owner: dict[str, Any]) -> str | None:
    """Why an owner record makes its directory a leftover, or None when it does not."""
    if controller_alive(owner) is False:
        return f"its vmtax (pid {owner.get('pid', '?')}) has ended"
    return None


def _qemus() -> dict[int, list[str]]:
    """The command line of every QEMU process."""
    out = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            argv = cmdline.read_bytes().decode("utf-8", "replace").split("\0")
            if Path(argv[0]).name.startswith("qemu-system"):
                out[int(cmdline.parent.name)] = argv
    return out


def _named(argv: list[str], root: Path, prefix: str) -> Path | None:
    """The directory under ``root`` named ``prefix*`` that a command line names, if any."""
    named = re.compile(re.escape(str(root / prefix)) + r"[^/,\s]+")
    for arg in argv[1:]:
        match = named.search(arg)
        if match:
            return Path(match[0])
    return None


def find(root: Path | None = None) -> list[Leftover]:
    """What earlier vmtax processes left under ``root`` (the temporary directory) and in
    ``RAM_ROOT``."""
    root = Path(root or tempfile.gettempdir())
    found: list[Leftover] = []
    qemus = _qemus()
    guest_dirs = set()
    for pid, argv in sorted(qemus.items()):
        directory = _named(argv, root, SCRATCH_PREFIX)
        if directory is None:
            continue
        guest_dirs.add(directory)
        stat = _stat(pid)
        if stat is None:
            continue  # it ended while we looked
        owner = read_owner(directory)
        if owner is not None:
            why = _owner_why(owner)
        elif stat[1] == "1":
            why = "no owner record, and the vmtax that started it has ended"
        else:
            why = None
        if why:
            rss = int(stat[21]) * os.sysconf("SC_PAGE_SIZE")
            found.append(Leftover("guest", directory, why, pid, int(stat[19]), _mib(rss)))
    # A leftover guest's memory directory goes with it (``remove`` stops guests first).
    left_pids = {x.pid for x in found}
    in_use = {_named(argv, RAM_ROOT, RAM_PREFIX) for p, argv in qemus.items() if p not in left_pids}
    unused = [
        ("scratch", d) for d in sorted(root.glob(SCRATCH_PREFIX + "*")) if d not in guest_dirs
    ]
    unused += [
        ("sweep memory", d) for d in sorted(RAM_ROOT.glob(RAM_PREFIX + "*")) if d not in in_use
    ]
    for kind, directory in unused:
        if not directory.is_dir():
            continue
        owner = read_owner(directory)
        try:
            idle = time.time() - directory.stat().st_mtime
            used = sum(p.lstat().st_blocks * 512 for p in directory.iterdir())
        except OSError:
            continue  # removed while we looked
        if owner is not None:
            why = _owner_why(owner)
        elif idle > UNOWNED_AFTER_S:
            why = "no owner record and no guest"
        else:
            why = None
        if why:
            found.append(Leftover(kind, directory, why, size=_mib(used)))
    return found


def remove(leftovers: list[Leftover], wait_s: float = 10.0) -> list[str]:
    """Kill each leftover guest and remove each directory; one line per thing done or not."""
    done = []
    for item in leftovers:
        if item.kind == "guest" and item.pid is not None:
            problem = _kill(item.pid, item.started, wait_s)
            if problem:
                done.append(f"QEMU pid {item.pid} not stopped: {problem}")
                continue
            done.append(f"stopped QEMU pid {item.pid}")
        shutil.rmtree(item.directory, ignore_errors=True)
        if item.directory.exists():
            done.append(f"could not remove {item.directory}")
        else:
            done.append(f"removed {item.directory}")
    return done


def _kill(pid: int, started: int | None, wait_s: float) -> str | None:
    """SIGKILL the process through a pidfd, so that a pid recycled since it was found is never
    hit: the start time is checked once the pidfd pins the process."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None  # already gone
    except OSError as exc:
        return exc.strerror
    try:
        if pid_start(pid) != started:
            return None  # the guest ended; the pid is another process's now
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:
            return None
        except OSError as exc:
            return exc.strerror
        # A pidfd turns readable when its process has ended.
        if not select.select([fd], [], [], wait_s)[0]:
            return f"still running {wait_s:g} s after SIGKILL"
        return None
    finally:
        os.close(fd)
