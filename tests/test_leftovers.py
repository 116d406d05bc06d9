"""Guests and scratch directories an earlier vmtax left behind: `vmtax doctor` names each in
one row, `vmtax doctor --clean` stops and removes them, and what a live vmtax owns is never
named. The leftovers are made by hand, without booting a guest: a scratch directory whose
owner record names a process that has ended, and a process whose command line names such a
directory as a guest's QEMU does."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vmtax.doctor import leftovers
from vmtax.doctor.leftovers import (
    OWNER_FILE,
    RAM_PREFIX,
    SCRATCH_PREFIX,
    UNOWNED_AFTER_S,
    controller_identity,
    pid_start,
)

pytestmark = pytest.mark.fast


def dead_owner() -> dict:
    """The owner record of a process that has ended."""
    proc = subprocess.Popen(["sleep", "60"])
    ident = {"host": socket.gethostname(), "pid": proc.pid, "pid_start": pid_start(proc.pid)}
    proc.kill()
    proc.wait()
    return ident


def scratch(root: Path, owner: dict | None, prefix: str = SCRATCH_PREFIX) -> Path:
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    if owner is not None:
        (directory / OWNER_FILE).write_text(json.dumps(owner))
    (directory / "console.log").write_text("")
    return directory


@contextlib.contextmanager
def fake_guest(directory: Path) -> Iterator[subprocess.Popen]:
    """A process whose command line is a guest's as the finder reads it: argv[0]
    qemu-system-x86_64 and an argument in the scratch directory (`tail -f` its console)."""
    proc = subprocess.Popen(
        ["qemu-system-x86_64", "-f", str(directory / "console.log")],
        executable=shutil.which("tail"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        deadline = time.monotonic() + 10
        while not cmdline.read_bytes().startswith(b"qemu-system"):  # until it has exec'd
            assert time.monotonic() < deadline, "the fake guest did not start"
            time.sleep(0.01)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.fixture
def tmp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directories vmtax looks in, private to the test: ``root`` for guests'
    scratch directories, ``root / "var"`` for a sweep's memory directories."""
    root = tmp_path / "tmp"
    (root / "var").mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    monkeypatch.setattr(leftovers, "RAM_ROOT", root / "var")
    return root


def leftover_rows(cli, *args: str) -> tuple[list[str], dict]:
    result = cli("doctor", "--format", "json", *args)
    data = json.loads(result.stdout)
    rows = [r["detail"] for r in data["capabilities"] if r["capability"] == "leftover"]
    return rows, data


def test_doctor_names_each_leftover_in_one_row_and_nothing_a_live_vmtax_owns(tmp_root, cli):
    left_dir = scratch(tmp_root, dead_owner())
    guest_dir = scratch(tmp_root, dead_owner())
    live_dir = scratch(tmp_root, controller_identity())
    live_guest_dir = scratch(tmp_root, controller_identity())
    fresh_unowned = scratch(tmp_root, None)  # a vmtax may be writing its record this instant
    old_unowned = scratch(tmp_root, None)
    # No owner record, but the process that started the guest (this one) lives.
    unowned_guest_dir = scratch(tmp_root, None)
    old = time.time() - 2 * UNOWNED_AFTER_S
    os.utime(old_unowned, (old, old))
    os.utime(unowned_guest_dir, (old, old))
    with contextlib.ExitStack() as guests:
        guest = guests.enter_context(fake_guest(guest_dir))
        live_guest = guests.enter_context(fake_guest(live_guest_dir))
        guests.enter_context(fake_guest(unowned_guest_dir))
        rows, _ = leftover_rows(cli)
    assert len(rows) == 3, rows
    (guest_row,) = [r for r in rows if str(guest_dir) in r]
    assert guest_row.startswith(f"QEMU pid {guest.pid} (") and "has ended" in guest_row
    (dir_row,) = [r for r in rows if str(left_dir) in r]
    assert dir_row.startswith("scratch directory ") and "has ended" in dir_row
    assert [r for r in rows if str(old_unowned) in r]
    named = " ".join(rows)
    assert str(live_dir) not in named and str(live_guest_dir) not in named
    assert str(fresh_unowned) not in named and f"pid {live_guest.pid} " not in named
    assert str(unowned_guest_dir) not in named


def test_doctor_clean_stops_leftover_guests_and_removes_their_directories(tmp_root, cli):
    left_dir = scratch(tmp_root, dead_owner())
    guest_dir = scratch(tmp_root, dead_owner())
    live_dir = scratch(tmp_root, controller_identity())
    ram_dir = scratch(tmp_root / "var", dead_owner(), RAM_PREFIX)  # a sweep's guests' RAM
    live_ram_dir = scratch(tmp_root / "var", controller_identity(), RAM_PREFIX)
    with fake_guest(guest_dir) as guest:
        rows, data = leftover_rows(cli, "--clean")
        assert guest.wait(10) == -9  # SIGKILLed by doctor
    assert len(rows) == 3
    assert [r for r in rows if r.startswith(f"sweep memory directory {ram_dir} ")]
    assert f"stopped QEMU pid {guest.pid}" in data["cleaned"]
    assert not guest_dir.exists() and not left_dir.exists() and not ram_dir.exists()
    assert live_dir.exists() and live_ram_dir.exists()  # a live vmtax's directories stay
    rows, data = leftover_rows(cli)
    assert rows == []
    (row,) = [r for r in data["capabilities"] if r["capability"] == "leftovers"]
    assert row["ok"] and row["detail"].startswith("not detected")
