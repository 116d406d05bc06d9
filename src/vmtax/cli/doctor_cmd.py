"""`vmtax doctor`: what this machine can do for vmtax, and one line to install what it lacks."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vmtax.errors import UsageError

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
    "fleet": "--inventory and --targets: fleets through Ansible (ansible-core, ansible-runner)",
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
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment.doctor import check

    if fmt not in ("text", "json"):
        raise UsageError(f"--format must be text or json, got {fmt!r}")
    checked = check(clean=clean)
    rows, apt, dnf, pip = checked.rows, checked.apt, checked.dnf, checked.pip
    cleaned = checked.cleaned
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
        _print(rows, apt, dnf, pip, checked.missing)
        for line in cleaned:
            typer.echo(line)
    if not checked.agent_ok:
        raise typer.Exit(1)


def _print(
    rows: list[dict[str, Any]],
    apt: str | None,
    dnf: str | None,
    pip: str | None,
    missing: list[str],
) -> None:
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
        if not apt:
            out.print("install what is missing (pip):", markup=False)
        out.print(f"  {pip}", markup=False, soft_wrap=True)
    if not missing:
        out.print("nothing is missing", markup=False)
    elif not apt and not pip:
        # ✘ rows that no package fixes (no /dev/kvm, a leftover guest): their rows say why.
        out.print(f"nothing to install; not usable here: {', '.join(missing)}", markup=False)
