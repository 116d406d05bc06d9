"""What this machine can do for vmtax, and the one line that installs what it lacks.

Each workload declares its own packages in its recipe (``vmtax.workloads.recipe``), which
the callers pass in as capabilities (``extra``); ``packages.txt`` beside this file lists the
rest: guests, tracing, the peer tools, screenshots, SSH. Together they are what `vmtax
doctor` checks, what a run names missing packages from, and what scripts/test installs.
Checking is cheap (PATH lookups and file tests); the agent and KVM, which need more, are
checked by the CLI command on top of this.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from vmtax.errors import VmtaxError

PACKAGES = Path(__file__).with_name("packages.txt")


@dataclass(frozen=True)
class Capability:
    name: str
    apt: tuple[str, ...]
    dnf: tuple[str, ...]
    needs: tuple[str, ...]


@dataclass
class Check:
    """One capability on this machine: ok, or what is missing (needs and their packages)."""

    capability: Capability
    missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing


def capabilities(path: Path = PACKAGES) -> dict[str, Capability]:
    out: dict[str, Capability] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, rest = line.split(None, 1)
        fields = {}
        for part in rest.split("|"):
            key, _, value = part.strip().partition(":")
            fields[key.strip()] = tuple(value.split())
        out[name] = Capability(name, fields["apt"], fields.get("dnf", ()), fields["needs"])
    return out


def all_apt_packages(extra: Iterable[Capability] = ()) -> list[str]:
    """Every Debian package the list and ``extra`` name (what scripts/test installs), sorted."""
    return sorted({p for c in [*capabilities().values(), *extra] for p in c.apt})


def _guest_kernel() -> tuple[Path, Path] | None:
    chosen = os.environ.get("VMTAX_KERNEL")
    if chosen:
        path = Path(chosen)
        mods = Path("/lib/modules") / path.name.removeprefix("vmlinuz-")
        return (path, mods) if path.is_file() else None
    for path in sorted(Path("/boot").glob("vmlinuz-*"), reverse=True):
        mods = Path("/lib/modules") / path.name.removeprefix("vmlinuz-")
        if mods.is_dir():
            return path, mods
    return None


def _present(need: str) -> bool:
    kind, _, arg = need.partition(":")
    if kind == "bin":
        return shutil.which(arg) is not None
    if kind == "path":
        return bool(glob.glob(arg))
    if kind == "kernel":
        return _guest_kernel() is not None
    if kind == "module":
        found = _guest_kernel()
        pattern = f"**/{arg}.ko*"
        return found is not None and any(found[1].glob(pattern))
    if kind == "py":
        return importlib.util.find_spec(arg) is not None
    raise ValueError(f"unknown need {need!r} in {PACKAGES.name}")


def check(name: str) -> Check:
    return check_capability(capabilities()[name])


def check_capability(cap: Capability) -> Check:
    return Check(cap, [n for n in cap.needs if not _present(n)])


def check_all(extra: Iterable[Capability] = ()) -> list[Check]:
    """Every capability of the list, then ``extra`` (the workloads' recipes)."""
    return [check_capability(c) for c in [*capabilities().values(), *extra]]


def install_line(checks: list[Check], manager: str = "apt") -> str | None:
    """One command that installs every package of every failed check, or None."""
    packages: list[str] = []
    for c in checks:
        if not c.ok:
            names = c.capability.apt if manager == "apt" else c.capability.dnf
            packages += [p for p in names if p not in packages]
    if not packages:
        return None
    # A fresh Debian or Ubuntu (a container, a cloud image) has no package lists yet.
    tool = "apt-get update && apt-get install -y" if manager == "apt" else "dnf install -y"
    return f"{tool} {' '.join(packages)}"


def require(*names: str, what: str) -> None:
    """Raise one VmtaxError naming every missing package of ``names`` at once."""
    require_capabilities([capabilities()[n] for n in dict.fromkeys(names)], what=what)


def require_capabilities(caps: Iterable[Capability], *, what: str) -> None:
    """Raise one VmtaxError naming every missing package of ``caps`` at once."""
    failed = [c for c in map(check_capability, caps) if not c.ok]
    if failed:
        needs = dict.fromkeys(m.partition(":")[2] or m for c in failed for m in c.missing)
        missing = ", ".join(needs)
        raise VmtaxError(f"{what} needs {missing}: {install_line(failed)}")
