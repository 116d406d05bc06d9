"""Every ``-o FILE`` vmtax writes: regular files only, written whole or not at all.

A report or an export is written to a temporary file beside its destination and renamed
over it, so a reader never sees half of one. A rename replaces whatever the name held, so
the destination is checked first: a directory, a FIFO, a socket or a device node is refused
in one line (renaming over ``/dev/full`` would have replaced the device). A symlink is
followed: its target is written (atomically, in the target's directory) and the link stays.
The standard library has the pieces (``os.replace``, ``tempfile``, ``stat``) but no call
that does this whole check, hence this module.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from vmtax.errors import UsageError, VmtaxError

#: The sentence each ``-o`` option's --help carries.
HELP = "A regular file; a symlink's target is written; a directory, FIFO or device is refused."

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def destination(path: str | Path) -> Path:
    """The regular file that writing ``path`` will replace or create (a symlink's target).

    UsageError for a destination that is not a regular file; VmtaxError when its directory
    does not exist. Call it before any work, so a bad ``-o`` costs nothing."""
    given = Path(path)
    real = Path(os.path.realpath(given))  # follows every symlink, also a dangling one's name
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise VmtaxError(f"cannot write {given}: {exc.strerror or exc}") from None
    if mode is not None and not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        shown = f"{given} (-> {real})" if real != given.absolute() else str(given)
        raise UsageError(f"cannot write {shown}: it is {kind}; -o writes regular files only")
    if not real.parent.is_dir():
        raise VmtaxError(f"cannot write {given}: directory {real.parent} does not exist")
    return real


@contextmanager
def open_output(path: str | Path, *, binary: bool = False) -> Iterator[IO[Any]]:
    """A file handle whose content replaces ``path``'s when the block ends without error.

    The file gets the umask's usual mode (0666 less the umask), not mkstemp's 0600: reports
    and exports are for sharing."""
    with open_outputs([path], binary=binary) as (fh,):
        yield fh


@contextmanager
def open_outputs(paths: Sequence[str | Path], *, binary: bool = False) -> Iterator[list[IO[Any]]]:
    """Handles of several files that appear together or not at all (an export's runs and
    its samples): each is written to a temporary file beside its destination, and only when
    the block ends without error are they renamed over their destinations. A failure (a full
    disk, Ctrl-C) removes every temporary file and leaves the destinations as they were."""
    reals = [destination(p) for p in paths]
    made: list[tuple[IO[Any], str]] = []
    try:
        for real in reals:
            fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", dir=real.parent)
            made.append((os.fdopen(fd, "wb" if binary else "w",
                                   encoding=None if binary else "utf-8"), tmp))  # fmt: skip
            os.fchmod(fd, 0o666 & ~_umask())
        yield [fh for fh, _ in made]
        for fh, _ in made:
            fh.close()  # a full disk can fail the last flush here: still nothing replaced
        # Checked again, all before the first rename: something may have taken a name while
        # the content was made.
        for real in reals:
            destination(real)
        for (_, tmp), real in zip(made, reals, strict=True):
            os.replace(tmp, real)
    except BaseException:
        for fh, tmp in made:
            with contextlib.suppress(OSError):
                fh.close()
            Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    """``text`` to ``path``, atomically, by the rules above."""
    with open_output(path) as fh:
        fh.write(text)


def _umask() -> int:
    # os.umask can only be read by setting it; set it straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
