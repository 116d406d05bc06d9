"""`vmtax doctor`: what this machine can do for vmtax, and one line to install what it lacks."""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vmtax import doctor as checks
from vmtax.doctor import leftovers
from vmtax.errors import UsageError, VmtaxError
from vmtax.hostprof import modes as exit_modes
from vmtax.targets.accel import kvm_verdict
from vmtax.targets.base import find_agent
from vmtax.workloads import package_capabilities

#: What each capability gives a user, in the order shown.
ENABLES = {
    "agent": "vmtax run on this machine (L0)",
    "levels": "--levels L1..L3: QEMU guests with a guest kernel",
    "kvm": "guests under KVM instead of TCG emulation",
    "testbed": "--inner-accel kvm: L2 under a real KVM, L3 nested (kvm_amd in a TCG L1)",
    "exits": "--exits and vmtax exits: exit counts from tracefs / perf",
    "exits counts": "--exits (counts): KVM's per-vCPU exit counters via QMP, no tracing",
    "exits trace": "--exits=trace: exits by reason with handling times (tracefs)",
    "peers": "bench/: sysbench, stress-ng, cyclictest and fio as peers",
    "oltp": "workload oltp (MariaDB, PostgreSQL, sysbench)",
    "http": "workload http (lighttpd, wrk)",
    "webapp": "sweep --workload triplet (lighttpd, PHP)",
    "memcached": "workload memcached",
    "net": "workload net (iperf3-style peers, namespaces)",
    "crypto": "workload crypto (openssl)",
    "hackbench": "workload hackbench",
    "screenshots": "report screenshots and browser checks (headless Chromium)",
    "ssh": "SSH targets and fleets (ssh client; sshd for the tests)",
    "tools": "file and ps, used by the image builder and cleanup",
    "postgres-store": "--db postgresql://... (the psycopg driver)",
    "leftovers": "nothing of an earlier vmtax running beside your runs",
    "leftover": "nothing: vmtax doctor --clean removes it",
}


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("doctor")(doctor)


def doctor(
    fmt: Annotated[str, typer.Option("--format", help="text | json")] = "text",
    clean: Annotated[
        bool,
        typer.Option(
            "--clean", help="stop the guests and remove the scratch directories left behind"
        ),
    ] = False,
) -> None:
    """Check what vmtax can do here, with ✔/✘ and the reason, and end with one install line.

    Exit 0 when the default `vmtax run` (this machine, L0) can run; 1 when even that cannot.
    Everything else missing is listed, with one `apt-get install` line (and a dnf line) that
    installs all of it. KVM is checked by booting a tiny test guest (once; the verdict is
    cached until QEMU, the kernel image or /dev/kvm change, or the host reboots).

    It also names, one row each, the guests and scratch directories an earlier vmtax left
    behind (their vmtax has ended); --clean stops those guests and removes the directories.

    Example: vmtax doctor

    Example: vmtax doctor --clean

    Example: vmtax doctor --format json | jq '.install.apt'
    """
    if fmt not in ("text", "json"):
        raise UsageError(f"--format must be text or json, got {fmt!r}")
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
    apt, dnf = checks.install_line(found, "apt"), checks.install_line(found, "dnf")
    pip = "pip install 'psycopg[binary]'" if not rows[-1]["ok"] else None
    left = leftovers.find()
    rows += _leftover_rows(left)
    cleaned = leftovers.remove(left) if clean else []
    if fmt == "json":
        typer.echo(
            json.dumps(
                {
                    "capabilities": rows,
                    "install": {"apt": apt, "dnf": dnf, "pip": pip},
                    "cleaned": cleaned,
                },
                indent=2,
            )
        )
    else:
        _print(rows, apt, dnf, pip)
        for line in cleaned:
            typer.echo(line)
    if not rows[0]["ok"]:
        raise typer.Exit(1)


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


def _driver_row() -> dict[str, Any]:
    ok = importlib.util.find_spec("psycopg") is not None
    detail = "psycopg" if ok else "no psycopg: pip install 'psycopg[binary]'"
    return {"capability": "postgres-store", "ok": ok, "detail": detail, "apt": []}


def _print(rows: list[dict[str, Any]], apt: str | None, dnf: str | None, pip: str | None) -> None:
    out = Console(highlight=False)
    table = Table(show_header=True, header_style="bold")
    for name in ("", "capability", "gives you", "state"):
        table.add_column(name)
    for r in rows:
        mark = "[green]✔[/]" if r["ok"] else "[red]✘[/]"
        table.add_row(mark, r["capability"], ENABLES.get(r["capability"], ""), escape(r["detail"]))
    out.print(table)
    # The install lines are never wrapped: each is one command to copy.
    if apt:
        out.print("install what is missing (Debian, Ubuntu):", markup=False)
        out.print(f"  {apt}", markup=False, soft_wrap=True)
        out.print(f"  (Fedora: {dnf})", markup=False, soft_wrap=True)
    if pip:
        out.print(f"  {pip}", markup=False, soft_wrap=True)
    if not apt and not pip:
        out.print("nothing is missing", markup=False)
