"""`vmtax import FILE...`: store saved agent streams (`vmtax-probe run ... > FILE`) as one
experiment, validated record by record as a live run's stream is, keeping every whole run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vmtax.cli.signals import sigterm_as_interrupt
from vmtax.errors import VmtaxError


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("import")(import_cmd)


def import_cmd(
    files: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE",
            help="Saved streams: vmtax-probe run PROBE ... > FILE; several make one experiment.",
        ),
    ],
    level: Annotated[
        str, typer.Option(help="The level the streams were measured at (L0 = on the machine).")
    ] = "L0",
    label: Annotated[
        list[str] | None, typer.Option(help="Configuration label key=value (repeatable).")
    ] = None,
    db: Annotated[
        str | None, typer.Option(help="Store URL; default $VMTAX_DB or the user data dir.")
    ] = None,
    allow_duplicate: Annotated[
        bool,
        typer.Option(
            help="Import streams the store already holds (same headers and samples) again, "
            "as a new experiment; without it they are not stored twice."
        ),
    ] = False,
) -> None:
    """Import saved vmtax-probe streams as a new experiment.

    Each stream is checked as a live run's is: one header, records in order, samples that
    are finite and not negative, each run's summary agreeing with its samples. Every whole
    run is stored. A run whose own records are broken is stored as lost, and so are the runs
    a stream that broke off had promised; the line at the end counts them.

    Several streams (e.g. one per boot of the same guest) make one experiment: runs with the
    same level and labels form one configuration, and each run keeps its stream's boot id.

    A stream is bounded: a line of at most 16 MiB (the agent's are under 100 kB) and at most
    64 GiB in all; past either it is refused (exit 2), so `vmtax import /dev/zero` ends. A
    stream whose end record says the agent failed, or whose samples are in another unit
    than its header's, is refused too.

    A FIFO is read as its writer writes it; a wait of more than a second is said on stderr.
    Ctrl-C or SIGTERM ends the import (exit 130); while it reads, nothing is stored.

    Streams already in the store (the same headers and samples) are not imported twice: it
    says which experiment holds them and exits 0; --allow-duplicate imports them anyway.

    Example: vmtax-probe run cpuid --runs 5 > cpuid.jsonl && vmtax import cpuid.jsonl

    Example: vmtax import boot1.jsonl boot2.jsonl --level L1 --label guest=small
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.cli.output import out_console, print_table
    from vmtax.experiment.importing import import_files
    from vmtax.experiment.request import parse_labels

    labels = parse_labels(label or [])
    with sigterm_as_interrupt():
        done = import_files(
            files, level=level, labels=labels, db=db, allow_duplicate=allow_duplicate
        )
    try:
        if done.already_held:
            names = ", ".join(str(f) for f in files)
            typer.echo(
                f"vmtax: warning: {names} {'is' if len(files) == 1 else 'are'} already "
                f"experiment {done.experiment_id} in {done.store.url_display} (same headers "
                "and samples); not imported again (--allow-duplicate imports it)",
                err=True,
            )
        else:
            print_table(out_console(), done.store, done.experiment_id)
    finally:
        done.store.close()
    typer.echo(f"experiment {done.experiment_id}")
    if done.problems:
        # As a live run reports a run that broke off: the whole runs are stored, these not.
        raise VmtaxError(
            f"{'; '.join(done.problems)}; {done.kept} whole runs kept, {done.lost} lost "
            f"[experiment {done.experiment_id}]"
        )
