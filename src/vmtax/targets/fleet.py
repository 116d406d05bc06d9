"""The hosts of an Ansible inventory, as the plan's targets.

Any inventory Ansible takes is read by Ansible itself (``ansible-inventory --list``):
static INI or YAML files, directories, inventory scripts and plugins (cloud plugins,
``constructed`` groups), narrowed by ``--limit``. A ``hosts.toml`` fleet file is translated
into a YAML inventory first (:func:`toml_inventory`), so both end up on one path.

A host's targets here only describe it (its name, level and labels); vmtax.fleet runs the
plan on them through ansible-runner. Variables vmtax reads from a host:

- ``vmtax_level`` (L0 by default): the level the host is;
- ``vmtax_remote_dir``: where the agent is kept on it (``~/.cache/vmtax/agents``);
- ``vmtax_label_<name>``: a label of its own;
- ``vmtax_forks`` (in ``all``): Ansible's forks, the hosts measured at once.

Every host is labelled ``host=<its inventory name>``, ``group=<the first group that lists
it directly>`` and ``groups=<every group it is in>``.

Example ``hosts.toml``::

    max_concurrency = 8            # Ansible's forks (default 4)

    [defaults]
    identity = "~/.ssh/id_ed25519"
    known_hosts = "~/.ssh/known_hosts"

    [[hosts]]
    url = "ssh://bench@node1"
    labels = { rack = "a" }
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vmtax.errors import UsageError, VmtaxError
from vmtax.targets.base import Capabilities, InventoryEntry, Target, TargetError
from vmtax.targets.hostranges import check_count, check_ranges

DEFAULT_FORKS = 4
INVENTORY_TIMEOUT_S = 300.0
_HOST_KEYS = {
    "url",
    "name",
    "identity",
    "known_hosts",
    "accept_new_host_key",
    "labels",
    "level",
    "remote_dir",
    "python",
    "passphrase_env",
}
_LEVEL = re.compile(r"^L[0-3]$")
_LABEL_PREFIX = "vmtax_label_"


class InventoryHost(Target):
    """One host of an inventory. It runs nothing itself: vmtax.fleet drives the whole
    inventory through Ansible at once."""

    def __init__(
        self,
        name: str,
        level: str,
        labels: dict[str, str],
        hostvars: dict[str, Any],
        inventory: Inventory,
    ) -> None:
        self.name = name
        self.level = level
        self._labels = labels
        self.hostvars = hostvars
        self.inventory = inventory
        self.last_stderr = ""

    def prepare(self) -> None:
        """Nothing to prepare here: Ansible reaches the host."""

    def run_agent(self, args: list[str], timeout: float) -> Iterator[str]:
        raise TargetError(f"{self.name}: an inventory host runs only through Ansible")

    def labels(self) -> dict[str, str]:
        return dict(self._labels)

    def capabilities(self) -> Capabilities:
        return Capabilities(ansible=InventoryEntry(self.inventory, self.hostvars))

    def provenance(self) -> dict[str, Any]:
        keep = ("ansible_host", "ansible_port", "ansible_user", "ansible_become")
        return {
            "kind": "ansible",
            "inventory_hostname": self.name,
            **{k: self.hostvars[k] for k in keep if k in self.hostvars},
        }


@dataclass
class Inventory:
    """What Ansible is given (``source``, ``limit``) and the hosts it resolved them to."""

    source: str
    limit: str | None = None
    targets: list[Target] = field(default_factory=list)
    max_concurrency: int = DEFAULT_FORKS

    def release(self) -> None:
        """Remove the inventory file translated from a ``hosts.toml``, if this is one."""
        release_inventory(self.source)


def load_fleet(path: str | Path, limit: str | None = None) -> Inventory:
    """The hosts of an inventory (or a ``hosts.toml`` translated into one), in Ansible's order,
    narrowed by ``limit`` (an Ansible host pattern)."""
    source = str(path)
    forks_default = DEFAULT_FORKS
    if source.endswith(".toml"):
        source, forks_default = toml_inventory(Path(path))
    try:
        return _resolve(path, source, limit, forks_default)
    except BaseException:
        release_inventory(source)  # a translation nobody will run
        raise


def _resolve(path: str | Path, source: str, limit: str | None, forks_default: int) -> Inventory:
    check_ranges(source)
    listed = _ansible_inventory(source, limit)
    inv = Inventory(source, limit)
    hostvars: dict[str, dict[str, Any]] = listed.get("_meta", {}).get("hostvars", {})
    direct, member = _groups(listed)
    names = list(direct)
    if not names:
        raise UsageError(
            f"{path}: the inventory lists no hosts"
            + (f" matching --limit {limit}" if limit else "")
        )
    check_count(str(path), len(names), limit)
    forks = _all_var(listed, hostvars, names, "vmtax_forks", forks_default)
    try:
        inv.max_concurrency = int(str(forks))
        if inv.max_concurrency < 1:
            raise ValueError
    except ValueError:
        raise UsageError(f"{path}: vmtax_forks must be a positive integer") from None
    for name in names:
        hv = hostvars.get(name, {})
        level = str(hv.get("vmtax_level", "L0"))
        if not _LEVEL.match(level):
            raise UsageError(f"{path}: host {name}: vmtax_level must be L0 to L3, got {level!r}")
        labels = {
            "host": name,
            "group": direct[name][0] if direct[name] else "ungrouped",
            "groups": ",".join(sorted(member[name])) or "ungrouped",
        }
        for key, value in hv.items():
            if key.startswith(_LABEL_PREFIX) and len(key) > len(_LABEL_PREFIX):
                labels[key[len(_LABEL_PREFIX) :]] = str(value)
        inv.targets.append(InventoryHost(name, level, labels, hv, inv))
    return inv


def _ansible_inventory(source: str, limit: str | None) -> dict[str, Any]:
    """``ansible-inventory --list``: Ansible reads the inventory, plugins and scripts too."""
    exe = shutil.which("ansible-inventory")
    if exe is None:
        raise VmtaxError(
            "--inventory needs Ansible (ansible-core and ansible-runner): pip install vmtax "
            "brings both; `vmtax doctor` checks"
        )
    argv = [exe, "-i", source, "--list", *(["--limit", limit] if limit else [])]
    proc = _bounded_run(argv, source)
    # Ansible warns (not fails) on an inventory it cannot parse: both count as unreadable.
    said = " ".join(proc.stderr.split())
    unreadable = "Unable to parse" in said or "No inventory was parsed" in said
    if proc.returncode != 0 or unreadable:
        why = ansible_reason(proc.stderr) or f"exit {proc.returncode}"
        raise UsageError(f"cannot read inventory {source}: {why}")
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise VmtaxError(f"{source}: ansible-inventory printed no JSON") from None
    if not isinstance(data, dict):
        raise VmtaxError(f"{source}: ansible-inventory printed no inventory")
    return data


def _bounded_run(argv: list[str], source: str) -> subprocess.CompletedProcess[str]:
    """``argv`` run for at most INVENTORY_TIMEOUT_S, in a session of its own so that the
    whole of it is killed at the limit: an inventory script Ansible starts holds the output
    pipe open, and killing ansible-inventory alone left the read waiting on it for ever."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ansible_env(),
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=INVENTORY_TIMEOUT_S)
    except BaseException as exc:  # the limit, or Ctrl-C: nothing of it outlives the read
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise VmtaxError(
                f"{source}: Ansible did not read the inventory in {INVENTORY_TIMEOUT_S:g} s "
                "(an inventory script that hangs?)"
            ) from None
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def ansible_reason(stderr: str) -> str:
    """The line of Ansible's stderr that says why, without its [WARNING]/[ERROR] prefix:
    an [ERROR], else the warning that the inventory could not be parsed, else the last
    line; the other warnings (a deprecation, a plugin skipped) are left out, so the
    one-line error is one reason, not all of Ansible's output pasted together."""
    lines = [" ".join(line.split()) for line in stderr.splitlines() if line.strip()]
    tagged = re.compile(r"^\[(WARNING|ERROR|DEPRECATION WARNING)\]:?\s*")
    errors = [ln for ln in lines if ln.startswith("[ERROR]")]
    parse = [ln for ln in lines if "Unable to parse" in ln or "No inventory was parsed" in ln]
    plain = [ln for ln in lines if not tagged.match(ln)]
    chosen = (errors or parse or plain or lines or [""])[0]
    return tagged.sub("", chosen)[:300]


def ansible_env() -> dict[str, str]:
    """The environment Ansible's commands run in: no colour, no cowsay, no retry files."""
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_NOCOWS": "1",
            "ANSIBLE_RETRY_FILES_ENABLED": "0",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "1",
            "ANSIBLE_DEPRECATION_WARNINGS": "0",
            "ANSIBLE_LOCALHOST_WARNING": "0",
        }
    )
    return env


def _groups(listed: dict[str, Any]) -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """host -> the groups listing it directly (in order), and host -> every group it is in."""
    children = {
        g: list(b.get("children", []))
        for g, b in listed.items()
        if g != "_meta" and isinstance(b, dict)
    }
    direct: dict[str, list[str]] = {}
    order = _group_order(children)
    for group in order:
        body = listed.get(group) or {}
        for host in body.get("hosts", []):
            direct.setdefault(host, [])
            if group != "ungrouped":
                direct[host].append(group)
    parents: dict[str, set[str]] = {}
    for group, kids in children.items():
        for kid in kids:
            parents.setdefault(kid, set()).add(group)
    member: dict[str, set[str]] = {}
    for host, groups in direct.items():
        seen: set[str] = set()
        todo = list(groups)
        while todo:
            g = todo.pop()
            if g in seen or g in ("all", "ungrouped"):
                continue
            seen.add(g)
            todo.extend(parents.get(g, ()))
        member[host] = seen
    return direct, member


def _group_order(children: dict[str, list[str]]) -> list[str]:
    """Groups from ``all`` down, breadth first, as the inventory lists them."""
    out: list[str] = []
    todo = ["all"]
    while todo:
        g = todo.pop(0)
        if g in out:
            continue
        out.append(g)
        todo.extend(children.get(g, []))
    return out + [g for g in children if g not in out]


def _all_var(
    listed: dict[str, Any],
    hostvars: dict[str, dict[str, Any]],
    names: list[str],
    key: str,
    default: Any,
) -> Any:
    # ansible-inventory pushes group vars down to the hosts: a var of `all` is on every host.
    values = {str(hostvars.get(n, {}).get(key)) for n in names if key in hostvars.get(n, {})}
    if len(values) > 1:
        raise UsageError(f"{key} differs between hosts; set it once, in the group all")
    return values.pop() if values else listed.get("all", {}).get("vars", {}).get(key, default)


# -- hosts.toml, translated into an inventory ------------------------------------------------

_made: list[Path] = []


def _remove_made() -> None:
    for made in _made:
        shutil.rmtree(made, ignore_errors=True)


def release_inventory(source: str) -> None:
    """Remove the inventory ``toml_inventory`` made for ``source`` once its run is over (the
    exit hook is only for a process that ends first: one that runs on leaves none behind)."""
    made = Path(source).parent
    if made in _made:
        _made.remove(made)
        shutil.rmtree(made, ignore_errors=True)


@dataclass
class FleetFile:
    """A ``hosts.toml``: each host's inventory variables, and the forks."""

    hosts: dict[str, dict[str, Any]]
    max_concurrency: int = DEFAULT_FORKS


def toml_inventory(path: Path) -> tuple[str, int]:
    """A ``hosts.toml`` as a YAML inventory file Ansible reads, and its max_concurrency."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise UsageError(f"cannot read fleet file {path}: {reason}") from None
    parsed = parse_fleet(text, path)
    made = Path(tempfile.mkdtemp(prefix="vmtax-inventory-"))
    if not _made:
        atexit.register(_remove_made)
    _made.append(made)
    target = made / f"{path.stem}.yml"
    target.write_text(yaml.safe_dump({"all": {"hosts": parsed.hosts}}, sort_keys=False))
    return str(target), parsed.max_concurrency


def parse_fleet(text: str, path: Path) -> FleetFile:
    """A ``hosts.toml``'s text, checked; UsageError with one line for anything malformed."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {' '.join(str(exc).split())}") from None
    hosts = data.get("hosts")
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, dict) for h in hosts):
        raise UsageError(f"{path}: no [[hosts]] entries")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict) or set(defaults) - _HOST_KEYS:
        raise UsageError(f"{path}: [defaults] must be a table of host keys")
    limit = data.get("max_concurrency", DEFAULT_FORKS)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise UsageError(f"{path}: max_concurrency must be a positive integer")
    out: dict[str, Any] = {}
    for i, entry in enumerate(hosts):
        where = f"{path}: hosts[{i}]"
        unknown = set(entry) - _HOST_KEYS
        if unknown:
            raise UsageError(f"{where}: unknown key {sorted(map(str, unknown))[0]!r}")
        name, hostvars = _toml_host({**defaults, **entry}, where)
        if name in out:
            raise UsageError(f"{path}: host {name} is listed twice")
        out[name] = hostvars
    return FleetFile(out, limit)


def _toml_host(merged: dict[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    from vmtax.targets.ssh import parse_url  # noqa: PLC0415 - the one parser of ssh URLs

    if "url" not in merged:
        raise UsageError(f"{where}: missing url (ssh://user@host[:port])")
    for key in _HOST_KEYS - {"accept_new_host_key", "labels"}:
        if key in merged and not isinstance(merged[key], str):
            raise UsageError(f"{where}: {key} must be a string")
    if not isinstance(merged.get("accept_new_host_key", False), bool):
        raise UsageError(f"{where}: accept_new_host_key must be true or false")
    labels = merged.get("labels") or {}
    if not isinstance(labels, dict):
        raise UsageError(f"{where}: labels must be a table")
    try:
        user, host, port = parse_url(merged["url"])
    except UsageError as exc:
        raise UsageError(f"{where}: {exc.message}") from None
    level = merged.get("level", "L0")
    if not _LEVEL.match(level):
        raise UsageError(f"{where}: level must be L0, L1, L2 or L3, got {level!r}")
    hv: dict[str, Any] = {"ansible_host": host, "ansible_port": port, "vmtax_level": level}
    if user:
        hv["ansible_user"] = user
    if "identity" in merged:
        # As given: Ansible and ssh expand a leading ~ on this machine themselves.
        hv["ansible_ssh_private_key_file"] = merged["identity"]
    ssh_opts = []
    if "known_hosts" in merged:
        ssh_opts += ["-o", f"UserKnownHostsFile={merged['known_hosts']}"]
    if merged.get("accept_new_host_key"):
        ssh_opts += ["-o", "StrictHostKeyChecking=accept-new"]
    if ssh_opts:
        hv["ansible_ssh_common_args"] = shlex.join(ssh_opts)  # Ansible splits it with shlex
    if "remote_dir" in merged:
        hv["vmtax_remote_dir"] = merged["remote_dir"]
    if "passphrase_env" in merged:
        hv["vmtax_passphrase_env"] = merged["passphrase_env"]
    if "python" in merged:
        hv["ansible_python_interpreter"] = merged["python"]
    for key, value in labels.items():
        hv[f"{_LABEL_PREFIX}{key}"] = str(value)
    return str(merged.get("name") or host), hv
