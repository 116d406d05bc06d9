"""How many hosts a static inventory's host ranges expand to, before Ansible expands them.

Ansible expands ``node[0:99999999999]`` into every name it stands for while it reads the
inventory, with no limit: ``ansible-inventory`` then runs out of memory or time, and
``--limit`` does not help, since the range is expanded before the limit applies. vmtax
counts the ranges of the inventory's static files first, with Ansible's syntax
(``[start:end]`` or ``[start:end:stride]``, numbers or single letters, several in one name
multiply), and refuses an inventory whose ranges name more hosts than one experiment holds.
No library exposes this count without expanding; hence the few lines here. Scripts and
plugins are Ansible's to run: their hosts are counted after listing (``MAX_HOSTS``).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from vmtax.errors import UsageError

#: The most hosts one experiment measures: past it, measure parts with --limit.
MAX_HOSTS = 100_000

_RANGE = re.compile(r"\[(\d+|[a-zA-Z]):(\d+|[a-zA-Z])(?::(\d+))?\]")
_READ_LIMIT = 16 << 20  # a static inventory larger than this is not one a person wrote


def _span(lo: str, hi: str, stride: str | None) -> int:
    step = max(int(stride or 1), 1)
    a, b = (int(lo), int(hi)) if lo.isdigit() and hi.isdigit() else (ord(lo), ord(hi))
    return max((b - a) // step + 1, 0)


def ranged_hosts(text: str) -> int:
    """The host names the ranges of an inventory's text expand to (lines without a range
    count nothing): per line, the product of its ranges' lengths."""
    total = 0
    for line in text.splitlines():
        spans = [_span(*m.groups()) for m in _RANGE.finditer(line.split("#", 1)[0])]
        if spans:
            total += math.prod(spans)
    return total


def _static_files(source: Path) -> list[Path]:
    files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
    # An executable file is an inventory script: Ansible runs it, its text is not hosts.
    return [p for p in files if not os.access(p, os.X_OK)]


def check_ranges(source: str) -> None:
    """Refuse, in one line, a static inventory whose host ranges name over MAX_HOSTS hosts."""
    path = Path(source)
    if not path.exists():
        return  # a "host1,host2," list: Ansible expands no range there
    for file in _static_files(path):
        try:
            with file.open("rb") as f:
                text = f.read(_READ_LIMIT).decode("utf-8", errors="replace")
        except OSError:
            continue  # Ansible reads it and says why
        hosts = ranged_hosts(text)
        if hosts > MAX_HOSTS:
            raise UsageError(
                f"{file}: its host ranges name {hosts:,} hosts, more than the {MAX_HOSTS:,} "
                "one experiment measures (Ansible would expand them all before --limit): "
                "split the range"
            )


def check_count(source: str, hosts: int, limit: str | None) -> None:
    """Refuse an inventory that lists over MAX_HOSTS hosts after Ansible read it."""
    if hosts > MAX_HOSTS:
        within = f" within --limit {limit}" if limit else ""
        raise UsageError(
            f"{source}: {hosts:,} hosts{within}, more than the {MAX_HOSTS:,} one experiment "
            "measures: measure a part at a time with --limit"
        )
