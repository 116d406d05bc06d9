"""A memory cap around the guests' QEMU processes, so that memory overcommitment pages
inside the cap and never pushes the whole machine.

cgroup v2 when its memory controller is available to us (``memory.max``, ``memory.high`` at
90% so reclaim starts before the hard limit, ``memory.swap.max``), else cgroup v1
(``memory.limit_in_bytes``, ``memory.memsw.limit_in_bytes``). The group is created below the
cgroup vmtax itself runs in, and removed at the end.

Guest RAM is anonymous memory in QEMU, which only swap can page out; on a machine without
swap the sweep backs guest RAM with a shared file instead (QEMU ``memory-backend-file``,
``share=on``), so reclaim writes guest pages back to that file and faults them in again:
paging to disk inside the cap, like study B's paging DASD.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from vmtax.errors import VmtaxError

V2_ROOTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))
V1_ROOT = Path("/sys/fs/cgroup/memory")


def swap_total_kb() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("SwapTotal:"):
                return int(line.split()[1])
    return 0


def _own(controller: str | None) -> str:
    """This process's cgroup path for ``controller`` (None: the v2 unified hierarchy)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        num, ctrls, path = line.split(":", 2)
        if controller is None and num == "0" and ctrls == "":
            return path
        if controller is not None and controller in ctrls.split(","):
            return path
    raise VmtaxError(f"this process is in no {controller or 'cgroup v2'} cgroup")


class MemoryCap:
    """A memory cgroup holding the guests; ``add(pid)`` moves a QEMU process in."""

    def __init__(self, name: str, limit_mb: int) -> None:
        self.limit_mb = int(limit_mb)
        self.version, self.path = self._make(name)
        #: Where this process itself is, to come back to after ``inside()``.
        self.home = self.path.parent
        self._write_limits()

    @staticmethod
    def _make(name: str) -> tuple[int, Path]:
        errors = []
        for root in V2_ROOTS:
            ctrl = root / "cgroup.controllers"
            if ctrl.is_file() and "memory" in ctrl.read_text().split():
                parent = root / _own(None).lstrip("/")
                path = parent / name
                try:
                    path.mkdir(exist_ok=True)
                    return 2, path
                except OSError as exc:
                    errors.append(f"{path}: {exc.strerror}")
        if (V1_ROOT / "memory.limit_in_bytes").is_file():
            path = V1_ROOT / _own("memory").lstrip("/") / name
            try:
                path.mkdir(exist_ok=True)
                return 1, path
            except OSError as exc:
                errors.append(f"{path}: {exc.strerror}")
        why = "; ".join(errors) or "no memory controller in cgroup v2 or v1"
        raise VmtaxError(f"cannot create a memory cgroup for the guests ({why}); run as root")

    def _write(self, name: str, value: str) -> None:
        try:
            (self.path / name).write_text(value)
        except OSError as exc:
            raise VmtaxError(f"cannot set {self.path / name} to {value}: {exc.strerror}") from None

    def _write_limits(self) -> None:
        limit = self.limit_mb << 20
        swap = swap_total_kb() << 10
        if self.version == 2:
            self._write("memory.max", str(limit))
            self._write("memory.high", str(limit * 9 // 10))
            with contextlib.suppress(VmtaxError):  # absent without swap accounting
                self._write("memory.swap.max", str(swap))
        else:
            self._write("memory.limit_in_bytes", str(limit))
            with contextlib.suppress(VmtaxError):  # absent without swap accounting
                self._write("memory.memsw.limit_in_bytes", str(limit + swap))

    def add(self, pid: int) -> None:
        self._write("cgroup.procs", str(pid))

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        """Run the block with this process in the cap, so that what it starts (QEMU) is
        born there and every page it touches is charged to the cap from the first. A
        process moved in later would leave its earlier pages charged outside. Charges are
        not moved (v1 ``move_charge_at_immigrate`` stays 0), so this process's own memory
        stays where it was."""
        self.add(os.getpid())
        try:
            yield
        finally:
            (self.home / "cgroup.procs").write_text(str(os.getpid()))

    def stat(self) -> dict[str, int]:
        """Counters that show paging: major faults, pages in/out, swap, usage, OOM kills."""
        out: dict[str, int] = {}
        with contextlib.suppress(OSError):
            for line in (self.path / "memory.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                out[key] = int(value)
        keys = (
            ("memory.current", "usage_bytes"),
            ("memory.swap.current", "swap_bytes"),
            ("memory.usage_in_bytes", "usage_bytes"),
            ("memory.failcnt", "failcnt"),
        )
        for name, key in keys:
            with contextlib.suppress(OSError, ValueError):
                out[key] = int((self.path / name).read_text().split()[0])
        events = "memory.events" if self.version == 2 else "memory.oom_control"
        with contextlib.suppress(OSError):
            for line in (self.path / events).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key in ("oom_kill", "high", "max", "oom"):
                    out[f"event_{key}"] = int(value)
        return out

    def paging(self, a: dict[str, int], b: dict[str, int], dt: float) -> dict[str, float]:
        """Per-second paging between two ``stat()`` readings, plus usage at the second."""
        prefix = "" if self.version == 2 else "total_"
        out: dict[str, float] = {}
        for key in ("pgmajfault", "pgpgin", "pgpgout", "workingset_refault_file",
                    "workingset_refault_anon", "pgsteal", "pswpin", "pswpout"):  # fmt: skip
            full = prefix + key
            if full in b and full in a and dt > 0:
                out[f"{key}_per_s"] = (b[full] - a[full]) / dt
        for key in ("usage_bytes", "swap_bytes"):
            if key in b:
                out[key.replace("_bytes", "_mb")] = b[key] / 2**20
        for key in (prefix + "swap", "swap"):
            if key in b:
                out["swap_mb"] = b[key] / 2**20
                break
        for key, value in b.items():
            if key.startswith("event_") or key == "failcnt":
                out[key] = value
        return out

    def close(self) -> None:
        """Remove the group (its processes must have exited; waits briefly for that)."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
