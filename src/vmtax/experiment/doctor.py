"""The doctor use case (`vmtax doctor`): what this machine can do for vmtax, one row per
capability with the reason, the install lines for what it lacks, and what an earlier vmtax
left behind (removed on request)."""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from typing import Any

from vmtax import doctor as checks
from vmtax.doctor import leftovers
from vmtax.errors import VmtaxError
from vmtax.hostprof import modes as exit_modes
from vmtax.targets.accel import kvm_verdict
from vmtax.targets.base import find_agent
from vmtax.workloads import package_capabilities


@dataclass(frozen=True)
class Checked:
    """One row per capability (``capability``, ``ok``, ``detail``, ``apt``; the agent's
    first), the install lines for what is missing (None when nothing is) and what --clean
    removed."""

    rows: list[dict[str, Any]]
    apt: str | None
    dnf: str | None
    pip: str | None
    cleaned: list[str]

    @property
    def missing(self) -> list[str]:
        """The capabilities marked ✘ (empty only when nothing is missing)."""
        return [str(r["capability"]) for r in self.rows if not r["ok"]]

    @property
    def agent_ok(self) -> bool:
        """Whether the default `vmtax run` (this machine, L0) can run."""
        return bool(self.rows[0]["ok"])


def check(*, clean: bool = False) -> Checked:
    """Check every capability; with ``clean``, stop the leftover guests and remove the
    leftover scratch directories."""
    found = checks.check_all(package_capabilities())
    rows: list[dict[str, Any]] = [_agent_row()]
    for c in found:
        rows.append(
            {
                "capability": c.capability.name,
                "ok": c.ok,
                "detail": "ok" if c.ok else "missing " + ", ".join(_need(m) for m in c.missing),
                "apt": [] if c.ok else list(c.capability.apt),
            }
        )
        if c.capability.name == "levels":
            rows.append(_kvm_row(c.ok))
        if c.capability.name == "exits":
            rows += [_exits_mode_row(mode) for mode in exit_modes.MODES]
    rows.append(_driver_row())
    rows.append(_ansible_row())
    apt, dnf = checks.install_line(found, "apt"), checks.install_line(found, "dnf")
    # The pip rows (the PostgreSQL driver, Ansible) each name their packages in "pip".
    wanted = [p for r in rows if not r["ok"] for p in r.get("pip", [])]
    pip = f"pip install {' '.join(wanted)}" if wanted else None
    left = leftovers.find()
    rows += _leftover_rows(left)
    cleaned = leftovers.remove(left) if clean else []
    return Checked(rows, apt, dnf, pip, cleaned)


def _leftover_rows(left: list[leftovers.Leftover]) -> list[dict[str, Any]]:
    if not left:
        detail = "not detected: no vmtax guest or scratch directory outlives its vmtax"
        return [{"capability": "leftovers", "ok": True, "detail": detail, "apt": []}]
    return [{"capability": "leftover", "ok": False, "detail": x.line(), "apt": []} for x in left]


def _need(need: str) -> str:
    kind, _, arg = need.partition(":")
    return {"kernel": "a guest kernel (/boot/vmlinuz-* with its modules)"}.get(kind, arg)


def _agent_row() -> dict[str, Any]:
    try:
        return {"capability": "agent", "ok": True, "detail": str(find_agent()), "apt": []}
    except VmtaxError as exc:
        return {"capability": "agent", "ok": False, "detail": exc.message, "apt": []}


def _kvm_row(levels_ok: bool) -> dict[str, Any]:
    row: dict[str, Any] = {"capability": "kvm", "ok": False, "apt": []}
    if not os.path.exists("/dev/kvm"):
        row["detail"] = "no /dev/kvm: guests run under TCG (emulation)"
    elif not levels_ok:
        row["detail"] = "not checked: needs the levels' packages first"
    else:
        verdict = kvm_verdict()
        row["ok"] = verdict.kvm_ok
        row["detail"] = verdict.reason if verdict.kvm_ok else f"{verdict.reason}; guests use TCG"
    return row


def _exits_mode_row(mode: str) -> dict[str, Any]:
    ok, detail = exit_modes.availability(mode)
    return {"capability": f"exits {mode}", "ok": ok, "detail": detail, "apt": []}


def _ansible_row() -> dict[str, Any]:
    # pip packages, not apt ones: the row names what to install in one line.
    missing = [name for name, found in (
        ("ansible-core", shutil.which("ansible-playbook") and shutil.which("ansible-inventory")),
        ("ansible-runner", importlib.util.find_spec("ansible_runner")),
    ) if not found]  # fmt: skip
    detail = "ansible-core, ansible-runner" if not missing else (
        f"no {' or '.join(missing)}: pip install {' '.join(missing)}"
    )  # fmt: skip
    return {"capability": "fleet", "ok": not missing, "detail": detail, "apt": [], "pip": missing}


def _driver_row() -> dict[str, Any]:
    ok = importlib.util.find_spec("psycopg") is not None
    detail = "psycopg" if ok else "no psycopg: pip install 'psycopg[binary]'"
    pip = [] if ok else ["'psycopg[binary]'"]
    return {"capability": "postgres-store", "ok": ok, "detail": detail, "apt": [], "pip": pip}
