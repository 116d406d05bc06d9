"""The suite's longest guest boots, measured beside the other tests instead of before them.

Three `vmtax run`s take minutes each, most of it a nested stack booting under TCG: the
nested-KVM testbed at L1+L2 and at L3, and L2 under TCG inside TCG. Each is a child process
that only waits on its guests, so conftest.py starts the ones the collected tests need as
soon as collection ends, one at a time and in the order the tests come, and a test that
reads one waits for it (``measured``). The other tests run meanwhile: on a 2-core machine
the boots take the core the rest of the suite leaves idle. Beside a CPU load there is little
idle to take, and the tests that run beside a boot are slowed by it.

Each child has its own temporary directory (TMPDIR), so its files never meet the checks of
the tests that run beside it; ``drain`` waits for all of them before the session's own
leftover check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

# One hour: a loaded machine takes about 6 minutes for the L3 stack; a boot that hangs is
# retried by vmtax itself, so this is only the guard against a run that never ends.
TIMEOUT = 3600


@dataclass(frozen=True)
class Measured:
    """A finished background run: its store's URL, its stderr and its exit status."""

    db: str
    stderr: str
    returncode: int


# The runs, by the fixture name the tests ask for: argv of `vmtax run` without --db.
RUNS: dict[str, list[str]] = {
    # One boot a level: the tests that share this run count exits, and a reboot of the
    # nested stack costs minutes (tests/test_levels.py covers boots). L2 has two vCPUs, for
    # wakeup's second thread; runs of up to 1 s give the probes some 200-270 iterations
    # each, so that the start-up's exits, subtracted once, are shared among many.
    "kvm_l1_l2_store": ["run", "--levels", "L1,L2", "--inner-accel", "kvm", "--preset",
                        "kvm-testbed-smp", "--probe", "cpuid", "--probe", "timer", "--probe",
                        "wakeup", "--probe", "io", "--runs", "3", "--duration", "1",
                        "--exits=trace", "--boots", "1"],
    "kvm_l3_store": ["run", "--levels", "L3", "--inner-accel", "kvm", "--probe", "cpuid",
                     "--runs", "2", "--duration", "2", "--exits=trace", "--boots", "1"],
    # One vCPU a level (seed-a-reserved): the boot is most of it, and L2 came up in 274 s
    # against 338 s with seed-c's two vCPUs a level on a 2-core machine (TCG in TCG).
    "tcg_l2_store": ["run", "--levels", "L2", "--inner-accel", "tcg", "--preset",
                     "seed-a-reserved", "--probe", "cpuid", "--runs", "2", "--boots", "1"],
}  # fmt: skip

_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="background-boot")
_futures: dict[str, Future[Measured]] = {}
_lock = threading.Lock()
_root: Path | None = None


def _measure(name: str, argv: list[str], root: Path) -> Measured:
    from vmtax.targets.base import find_agent

    work = root / name
    (work / "tmp").mkdir(parents=True)
    db = f"sqlite:///{work / 'e.db'}"
    env = {**os.environ, "VMTAX_PROBE": str(find_agent()), "VMTAX_RUN_REPORT": "none",
           "TMPDIR": str(work / "tmp")}  # fmt: skip
    env.pop("VMTAX_DB", None)
    try:
        res = subprocess.run([sys.executable, "-c", "from vmtax.entry import main; main()", *argv,
                              "--db", db], env=env, capture_output=True, text=True,
                             timeout=TIMEOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        return Measured(db, f"timed out after {TIMEOUT} s\n{err or ''}", -1)
    return Measured(db, res.stderr, res.returncode)


def start(names: list[str]) -> None:
    """Queue the named runs (keys of RUNS), in this order, one at a time."""
    global _root
    with _lock:
        for name in names:
            if name in _futures:
                continue
            if _root is None:
                _root = Path(tempfile.mkdtemp(prefix="pytest-boots-"))
            _futures[name] = _pool.submit(_measure, name, RUNS[name], _root)


def measured(name: str) -> Measured:
    """The named run's result, waiting for it (and starting it if nothing queued it)."""
    start([name])
    return _futures[name].result()


def drain() -> None:
    """Wait for every queued run, then remove their files."""
    global _root
    with _lock:
        futures = list(_futures.values())
    for future in futures:
        # A run no test came to read (the session stopped early) is not started; a started
        # one is waited for: its guests stop with it. A failure belongs to its test.
        if not future.cancel():
            future.exception()
    with _lock:
        if _root is not None:
            shutil.rmtree(_root, ignore_errors=True)
            _root = None
        _futures.clear()
