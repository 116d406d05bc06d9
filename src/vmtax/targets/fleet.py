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

An Ansible inventory works as a fleet file too: ``.yml``/``.yaml`` is read as a YAML
inventory, ``.ini``/``.cfg``/a file without a suffix as an INI inventory (``.toml`` is the
format above). ``ansible_host``, ``ansible_port``, ``ansible_user`` and
``ansible_ssh_private_key_file`` (or ``ansible_private_key_file``) give the URL and key;
``vmtax_<key>`` variables (``vmtax_level``, ``vmtax_known_hosts``, ``vmtax_remote_dir``,
``vmtax_accept_new_host_key`` ...) any key of a ``[[hosts]]`` entry, ``vmtax_label_<name>``
a label, and ``vmtax_max_concurrency`` in ``[all:vars]`` the limit. Every host is labelled
``group=<the group that lists it>``.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import yaml

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
    "passphrase_env",
}
T = TypeVar("T")
_LEVEL = re.compile(r"^L[0-3]$")


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


_STRING_KEYS = ("url", "name", "identity", "known_hosts", "level", "agent", "remote_dir",
                "passphrase_env")  # fmt: skip


def _host_target(entry: dict[str, Any], defaults: dict[str, Any], where: str) -> SshTarget:
    unknown = set(entry) - _HOST_KEYS
    if unknown:
        raise UsageError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    merged = {**defaults, **entry}
    if "url" not in merged:
        raise UsageError(f"{where}: missing url (ssh://user@host[:port])")
    for key in _STRING_KEYS:
        if key in merged and not isinstance(merged[key], str):
            raise UsageError(f"{where}: {key} must be a string")
    if not isinstance(merged.get("accept_new_host_key", False), bool):
        raise UsageError(f"{where}: accept_new_host_key must be true or false")
    level = merged.get("level", "L0")
    if not _LEVEL.match(level):
        raise UsageError(f"{where}: level must be L0, L1, L2 or L3, got {level!r}")
    labels = merged.get("labels") or {}
    if not isinstance(labels, dict):
        raise UsageError(f"{where}: labels must be a table")
    optional = {k: merged[k] for k in ("passphrase_env",) if k in merged}
    try:
        return SshTarget(
            merged["url"],
            accept_new_host_key=merged.get("accept_new_host_key", False),
            known_hosts=merged.get("known_hosts"),
            identity=merged.get("identity"),
            level=level,
            name=merged.get("name"),
            agent=merged.get("agent"),
            labels={str(k): str(v) for k, v in labels.items()},
            remote_dir=merged.get("remote_dir"),
            **optional,
        )
    except UsageError as exc:
        raise UsageError(f"{where}: {exc.message}") from None


def read_fleet(path: str | Path) -> Fleet:
    """Parse a fleet file (``hosts.toml`` or an Ansible INI/YAML inventory); UsageError with
    one line for anything malformed."""
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise UsageError(f"cannot read fleet file {p}: {reason}") from None
    return parse_fleet(text, p)


def parse_fleet(text: str, p: Path) -> Fleet:
    """Parse a fleet file's text; its format follows ``p``'s suffix (see the module doc)."""
    suffix = p.suffix.lower()
    if suffix in (".yml", ".yaml"):
        data = inventory_yaml(text, p)
    elif suffix in ("", ".ini", ".cfg"):
        data = inventory_ini(text, p)
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"{p}: not valid TOML: {_one_line(str(exc))}") from None
    hosts = data.get("hosts")
    if not isinstance(hosts, list) or not hosts:
        raise UsageError(f"{p}: no [[hosts]] entries")
    if not all(isinstance(h, dict) for h in hosts):
        raise UsageError(f"{p}: every [[hosts]] entry must be a table")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise UsageError(f"{p}: [defaults] must be a table")
    if set(defaults) - _HOST_KEYS:
        raise UsageError(f"{p}: unknown key in [defaults]: {sorted(set(defaults) - _HOST_KEYS)[0]}")
    limit = data.get("max_concurrency", DEFAULT_CONCURRENCY)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
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


# -- Ansible inventories ----------------------------------------------------------------------
# Hand-written: the only complete reader is ansible-core's InventoryManager, a large
# dependency (and one that runs inventory plugins and scripts); vmtax needs the static INI and
# YAML formats only, and reads them into the same dict as hosts.toml.

_ANSIBLE_URL_VARS = {"ansible_host", "ansible_port", "ansible_user", "ansible_ssh_host",
                     "ansible_ssh_port", "ansible_ssh_user"}  # fmt: skip
_ANSIBLE_KEY_VARS = ("ansible_ssh_private_key_file", "ansible_private_key_file")
_RANGE = re.compile(r"\[([0-9a-z]+):([0-9a-z]+)(?::([0-9]+))?\]")
_MAX_EXPANDED = 100_000


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def expand_host_pattern(pattern: str, where: str) -> list[str]:
    """``node[01:03]`` -> node01, node02, node03 (Ansible's numeric and letter ranges)."""
    m = _RANGE.search(pattern)
    if not m:
        return [pattern]
    lo, hi, step = m.group(1), m.group(2), int(m.group(3) or 1)
    head, tail = pattern[: m.start()], pattern[m.end() :]
    if lo.isdigit() and hi.isdigit():
        width = len(lo) if lo.startswith("0") else 0
        numbers = range(int(lo), int(hi) + 1, max(step, 1))

        def name(n: int) -> str:
            return str(n).zfill(width)

    elif len(lo) == len(hi) == 1 and lo.isalpha() and hi.isalpha():
        numbers = range(ord(lo), ord(hi) + 1, max(step, 1))

        def name(n: int) -> str:
            return chr(n)

    else:
        raise UsageError(f"{where}: bad host range {m.group(0)!r}")
    # Sized before it is listed: node[0:99999999999] must be refused, not filled into memory.
    if not numbers or len(numbers) > _MAX_EXPANDED:
        raise UsageError(f"{where}: host range {m.group(0)!r} is empty or too large")
    out: list[str] = []
    for n in numbers:
        out.extend(expand_host_pattern(head + name(n) + tail, where))
        if len(out) > _MAX_EXPANDED:
            raise UsageError(f"{where}: host range {m.group(0)!r} is too large")
    return out


class _Inventory:
    """Groups, their hosts, vars and children, as both inventory formats describe them."""

    def __init__(self, source: Path) -> None:
        self.source = source
        self.hosts: dict[str, dict[str, Any]] = {}  # host -> its own vars, in file order
        self.host_group: dict[str, str] = {}  # host -> first group that listed it
        self.members: dict[str, list[str]] = {}  # group -> hosts listed directly
        self.children: dict[str, list[str]] = {}
        self.group_vars: dict[str, dict[str, Any]] = {}

    def add_host(self, group: str, name: str, variables: dict[str, Any]) -> None:
        self.hosts.setdefault(name, {}).update(variables)
        self.host_group.setdefault(name, group)
        self.members.setdefault(group, [])
        if name not in self.members[group]:
            self.members[group].append(name)

    def _parents(self, group: str) -> list[str]:
        return [g for g, kids in self.children.items() if group in kids]

    def _group_chain(self, group: str) -> list[str]:
        # all, then ancestors from the outermost in, then the group: inner groups win.
        seen: list[str] = []
        todo = [group]
        while todo:
            g = todo.pop()
            if g in seen:
                continue  # a cycle in :children is ignored rather than looped on
            seen.append(g)
            todo.extend(self._parents(g))
        return ["all", *[g for g in reversed(seen) if g != "all"]]

    def fleet_dict(self) -> dict[str, Any]:
        where = str(self.source)
        if not self.hosts:
            raise UsageError(f"{where}: the inventory lists no hosts")
        all_vars = self.group_vars.get("all", {})
        out: dict[str, Any] = {"hosts": []}
        if "vmtax_max_concurrency" in all_vars:
            limit = all_vars["vmtax_max_concurrency"]
            try:
                out["max_concurrency"] = int(str(limit))
            except ValueError:
                raise UsageError(f"{where}: vmtax_max_concurrency must be an integer") from None
        for name, own in self.hosts.items():
            merged: dict[str, Any] = {}
            groups = [g for g, hosts in self.members.items() if name in hosts]
            for g in groups:
                for link in self._group_chain(g):
                    merged.update(self.group_vars.get(link, {}))
            merged.update(own)
            out["hosts"].append(self._entry(name, self.host_group[name], merged))
        return out

    def _entry(self, name: str, group: str, v: dict[str, Any]) -> dict[str, Any]:
        where = f"{self.source}: host {name}"

        def text(key: str) -> str | None:
            value = v.get(key)
            if value is None:
                return None
            if isinstance(value, dict | list):
                raise UsageError(f"{where}: {key} must be a single value")
            return str(value)

        host = text("ansible_host") or text("ansible_ssh_host") or name
        port = text("ansible_port") or text("ansible_ssh_port")
        user = text("ansible_user") or text("ansible_ssh_user")
        if port is not None and not port.isdigit():
            raise UsageError(f"{where}: ansible_port must be a number, got {port!r}")
        if any(c in host for c in "/@?#[] ") and not (host.startswith("[") and host.endswith("]")):
            raise UsageError(f"{where}: bad ansible_host {host!r}")
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"  # an IPv6 address
        entry: dict[str, Any] = {
            "url": f"ssh://{quote(user, safe='') + '@' if user else ''}{host}"
            + (f":{port}" if port else ""),
            "name": name,
        }
        labels = {"group": group}
        for key in _ANSIBLE_KEY_VARS:
            if text(key):
                entry["identity"] = text(key)
                break
        for key, value in v.items():
            if key.startswith("vmtax_label_") and len(key) > len("vmtax_label_"):
                labels[key[len("vmtax_label_") :]] = str(value)
            elif key.startswith("vmtax_") and key != "vmtax_max_concurrency":
                short = key[len("vmtax_") :]
                if short not in _HOST_KEYS or short == "labels":
                    raise UsageError(f"{where}: unknown variable {key!r}")
                entry[short] = _ansible_bool(value) if short == "accept_new_host_key" else value
        entry["labels"] = labels
        return entry


def _ansible_bool(value: Any) -> Any:
    if isinstance(value, str) and value.lower() in ("true", "yes", "on", "1"):
        return True
    if isinstance(value, str) and value.lower() in ("false", "no", "off", "0"):
        return False
    return value


def _ini_value(raw: str) -> Any:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    return raw


def _ini_vars(words: list[str], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for word in words:
        key, eq, value = word.partition("=")
        if not eq or not key:
            raise UsageError(f"{where}: expected key=value, got {word!r}")
        out[key] = _ini_value(value)
    return out


def inventory_ini(text: str, source: Path) -> dict[str, Any]:
    """An Ansible INI inventory as a fleet dict (``[group]``, ``[group:vars]``,
    ``[group:children]``, host lines with ``key=value`` variables)."""
    inv = _Inventory(source)
    section, kind = "ungrouped", "hosts"
    for lineno, raw in enumerate(text.splitlines(), start=1):
        where = f"{source}: line {lineno}"
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            if not line.endswith("]") or len(line) < 3:
                raise UsageError(f"{where}: bad section header {_one_line(line)[:60]!r}")
            section, _, kind = line[1:-1].strip().partition(":")
            kind = kind or "hosts"
            if not section or kind not in ("hosts", "vars", "children"):
                raise UsageError(f"{where}: bad section [{_one_line(line[1:-1])[:60]}]")
            inv.members.setdefault(section, [])
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise UsageError(f"{where}: {exc}") from None
        if not words:
            continue
        if kind == "vars":
            key, eq, value = line.partition("=")
            if not eq or not key.strip():
                raise UsageError(f"{where}: expected key=value in [{section}:vars]")
            inv.group_vars.setdefault(section, {})[key.strip()] = _ini_value(value)
        elif kind == "children":
            inv.children.setdefault(section, []).append(words[0])
        else:
            variables = _ini_vars(words[1:], where)
            for name in expand_host_pattern(words[0], where):
                inv.add_host(section, name, variables)
    return inv.fleet_dict()


def inventory_yaml(text: str, source: Path) -> dict[str, Any]:
    """An Ansible YAML inventory as a fleet dict (groups with ``hosts``, ``vars`` and
    ``children``, from the top-level groups down)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"{source}: not valid YAML: {_one_line(str(exc))[:200]}") from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # PyYAML's constructors can raise these for odd scalars (e.g. a huge timestamp).
        raise UsageError(f"{source}: not valid YAML: {_one_line(str(exc))[:200]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{source}: an inventory is a mapping of groups (e.g. all:)")
    inv = _Inventory(source)
    todo = [(str(g), body) for g, body in data.items()]
    seen: set[str] = set()
    while todo:
        group, body = todo.pop(0)
        where = f"{source}: group {group}"
        if group in seen:
            continue
        seen.add(group)
        body = body or {}
        if not isinstance(body, dict):
            raise UsageError(f"{where}: must be a mapping (hosts, vars, children)")
        extra = set(body) - {"hosts", "vars", "children"}
        if extra:
            raise UsageError(f"{where}: unknown key {sorted(map(str, extra))[0]!r}")
        hosts = body.get("hosts") or {}
        variables = body.get("vars") or {}
        children = body.get("children") or {}
        for part, name in ((hosts, "hosts"), (variables, "vars"), (children, "children")):
            if not isinstance(part, dict):
                raise UsageError(f"{where}: {name} must be a mapping")
        inv.members.setdefault(group, [])
        inv.group_vars.setdefault(group, {}).update({str(k): v for k, v in variables.items()})
        for host, host_vars in hosts.items():
            host_vars = host_vars or {}
            if not isinstance(host_vars, dict):
                raise UsageError(f"{where}: host {host}: variables must be a mapping")
            for name in expand_host_pattern(str(host), where):
                inv.add_host(group, name, {str(k): v for k, v in host_vars.items()})
        for child, child_body in children.items():
            inv.children.setdefault(group, []).append(str(child))
            todo.append((str(child), child_body))
    return inv.fleet_dict()
