"""A fleet of SSH hosts from a ``hosts.toml`` file.

Example::

    max_concurrency = 8            # hosts measured at the same time (default 4)

    [defaults]                     # applies to every host unless the host overrides it
    identity = "~/.ssh/id_ed25519"
    known_hosts = "~/.ssh/known_hosts"
    accept_new_host_key = false

    [[hosts]]
    url = "ssh://bench@node1"
    labels = { rack = "a" }

    [[hosts]]
    url = "ssh://bench@node2:2222"
    name = "node2"

Each host becomes an :class:`~vmtax.targets.ssh.SshTarget`. The runner measures at most
``max_concurrency`` hosts at once; a host that fails is reported and the others go on.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from vmtax.errors import UsageError, VmtaxError
from vmtax.targets.base import Target
from vmtax.targets.ssh import SshTarget

DEFAULT_CONCURRENCY = 4
_HOST_KEYS = {
    "url",
    "name",
    "identity",
    "known_hosts",
    "accept_new_host_key",
    "labels",
    "level",
    "agent",
    "remote_dir",
}
T = TypeVar("T")


@dataclass
class Fleet:
    targets: list[Target]
    max_concurrency: int = DEFAULT_CONCURRENCY


@dataclass
class HostResult:
    """What happened on one host of a fan-out: a value or a one-line error."""

    name: str
    value: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class FanOut:
    results: list[HostResult] = field(default_factory=list)

    @property
    def ok(self) -> list[HostResult]:
        return [r for r in self.results if r.ok]

    @property
    def failed(self) -> list[HostResult]:
        return [r for r in self.results if not r.ok]


def _host_target(entry: dict[str, Any], defaults: dict[str, Any], where: str) -> SshTarget:
    unknown = set(entry) - _HOST_KEYS
    if unknown:
        raise UsageError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    merged = {**defaults, **entry}
    if "url" not in merged:
        raise UsageError(f"{where}: missing url (ssh://user@host[:port])")
    labels = merged.get("labels") or {}
    if not isinstance(labels, dict):
        raise UsageError(f"{where}: labels must be a table")
    return SshTarget(
        str(merged["url"]),
        accept_new_host_key=bool(merged.get("accept_new_host_key", False)),
        known_hosts=merged.get("known_hosts"),
        identity=merged.get("identity"),
        level=str(merged.get("level", "L0")),
        name=merged.get("name"),
        agent=merged.get("agent"),
        labels={str(k): str(v) for k, v in labels.items()},
        remote_dir=merged.get("remote_dir"),
    )


def read_fleet(path: str | Path) -> Fleet:
    """Parse ``hosts.toml``; UsageError with one line for anything malformed."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except OSError as exc:
        raise UsageError(f"cannot read fleet file {p}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{p}: not valid TOML: {exc}") from None
    hosts = data.get("hosts")
    if not isinstance(hosts, list) or not hosts:
        raise UsageError(f"{p}: no [[hosts]] entries")
    defaults = data.get("defaults") or {}
    if set(defaults) - _HOST_KEYS:
        raise UsageError(f"{p}: unknown key in [defaults]: {sorted(set(defaults) - _HOST_KEYS)[0]}")
    limit = data.get("max_concurrency", DEFAULT_CONCURRENCY)
    if not isinstance(limit, int) or limit < 1:
        raise UsageError(f"{p}: max_concurrency must be a positive integer")
    targets: list[Target] = [
        _host_target(h, defaults, f"{p}: hosts[{i}]") for i, h in enumerate(hosts)
    ]
    names = [t.name for t in targets]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise UsageError(f"{p}: host {dup} is listed twice")
    return Fleet(targets, limit)


def load_fleet(path: str | Path) -> Fleet:
    """The fleet's targets and its concurrency limit (``.targets``, ``.max_concurrency``)."""
    return read_fleet(path)


def fan_out(targets: list[Target], work: Callable[[Target], T], max_concurrency: int) -> FanOut:
    """Run ``work(target)`` on every target, at most ``max_concurrency`` at a time. A failing
    host becomes a one-line error in its result; the others are not disturbed."""

    def one(target: Target) -> HostResult:
        try:
            return HostResult(target.name, value=work(target))
        except VmtaxError as exc:
            return HostResult(target.name, error=exc.message)
        finally:
            target.close()

    with ThreadPoolExecutor(max_workers=max(1, min(max_concurrency, len(targets)))) as pool:
        return FanOut(list(pool.map(one, targets)))
