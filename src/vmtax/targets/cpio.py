"""A tiny writer for the ``newc`` cpio format the Linux kernel unpacks as an initramfs.

Written here rather than calling ``cpio`` so that the archive is byte-for-byte reproducible
(fixed inode numbers, owners and times), which the content-hash image cache relies on.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from typing import BinaryIO

_MAGIC = b"070701"


@dataclass(frozen=True)
class Entry:
    """One archive member. ``data`` is the file content or, for a symlink, its target."""

    path: str
    mode: int
    data: bytes = b""
    rdev: tuple[int, int] = (0, 0)


def directory(path: str) -> Entry:
    return Entry(path, stat.S_IFDIR | 0o755)


def regular(path: str, data: bytes, perm: int = 0o644) -> Entry:
    return Entry(path, stat.S_IFREG | perm, data)


def symlink(path: str, target: str) -> Entry:
    return Entry(path, stat.S_IFLNK | 0o777, target.encode())


def chardev(path: str, major: int, minor: int) -> Entry:
    return Entry(path, stat.S_IFCHR | 0o600, rdev=(major, minor))


def _pad(out: BinaryIO, written: int) -> None:
    out.write(b"\0" * (-written % 4))


def _header(ino: int, entry: Entry, name: bytes) -> bytes:
    fields = (
        ino,
        entry.mode,
        0,  # uid
        0,  # gid
        2 if stat.S_ISDIR(entry.mode) else 1,
        0,  # mtime: fixed for reproducibility
        len(entry.data),
        0,
        0,
        entry.rdev[0],
        entry.rdev[1],
        len(name) + 1,
        0,
    )
    return _MAGIC + b"".join(b"%08X" % f for f in fields)


def write_newc(out: BinaryIO, entries: list[Entry]) -> None:
    """Write ``entries`` (parents before children) and the trailer to ``out``."""
    for ino, entry in enumerate([*entries, Entry("TRAILER!!!", 0)], start=1):
        name = entry.path.lstrip("/").encode()
        head = _header(0 if entry.path == "TRAILER!!!" else ino, entry, name)
        out.write(head + name + b"\0")
        _pad(out, len(head) + len(name) + 1)
        out.write(entry.data)
        _pad(out, len(entry.data))
