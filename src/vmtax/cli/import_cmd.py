"""`vmtax import FILE`: store a saved agent stream (`vmtax-probe run ... > FILE`) as an
experiment, validated record by record as a live run's stream is, keeping every whole run."""

from __future__ import annotations

import hashlib
import json
from functools import partial
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from vmtax.cli.results_cmd import out_console, print_table
from vmtax.contract import Header, ProbeStream, read_stream
from vmtax.errors import UsageError, VmtaxError
from vmtax.experiment.request import parse_labels
from vmtax.runner import detected_labels
from vmtax.store import Store
from vmtax.version import __version__


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("import")(import_cmd)


def import_cmd(
    file: Annotated[Path, typer.Argument(help="A saved stream: vmtax-probe run PROBE ... > FILE.")],
    level: Annotated[
        str, typer.Option(help="The level the stream was measured at (L0 = on the machine).")
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
            help="Import a stream the store already holds (same header and samples) again, "
            "as a new experiment; without it the stream is not stored twice."
        ),
    ] = False,
) -> None:
    """Import a saved vmtax-probe stream as a new experiment.

    The stream is checked as a live run's is: one header, records in order, each run's
    sample count equal to its summary's n. Every whole run is stored; a stream that breaks
    off keeps the runs before the break, records the unfinished ones as lost, and says so.

    A stream already in the store (the same header and samples) is not imported twice: it
    says which experiment holds it and exits 0; --allow-duplicate imports it anyway.

    Example: vmtax-probe run cpuid --runs 5 > cpuid.jsonl && vmtax import cpuid.jsonl
    """
    if level not in ("L0", "L1", "L2", "L3"):
        raise UsageError(f"--level must be L0, L1, L2 or L3, got {level!r}")
    labels = parse_labels(label or [])
    try:
        with file.open("rb") as fh:
            stream = read_stream(fh)
    except OSError as exc:
        raise UsageError(f"cannot read {file}: {exc.strerror or exc}") from None
    header = stream.header
    if header is None:
        raise UsageError(f"{file} is not a vmtax-probe stream: {stream.problem}")
    store = Store.open(db)
    digest = stream_digest(header, stream)
    try:
        held = None if allow_duplicate else _holding(store, digest)
        if held is not None:
            typer.echo(
                f"vmtax: warning: {file} is already experiment {held} in {store.url_display} "
                "(same header and samples); not imported again (--allow-duplicate imports it)",
                err=True,
            )
            typer.echo(f"experiment {held}")
            return
        exp_id, lost = _store_stream(store, header, stream, file, level, labels, digest)
        print_table(out_console(), store, exp_id)
    finally:
        store.close()
    typer.echo(f"experiment {exp_id}")
    if stream.problem or lost:
        # As a live run reports a run that broke off: the whole runs are stored, this is not.
        raise VmtaxError(
            f"{file}: {stream.problem or 'runs without a summary'}; "
            f"{len(stream.runs)} whole runs kept, {lost} lost [experiment {exp_id}]"
        )


def _store_stream(
    store: Store,
    header: Header,
    stream: ProbeStream,
    file: Path,
    level: str,
    labels: dict[str, str],
    digest: str,
) -> tuple[int, int]:
    """One experiment, one configuration, one row per run (whole runs ok, unfinished lost)."""
    dumped = header.model_dump(mode="json", by_alias=True)
    if level == "L0":
        labels = {**detected_labels(header.env), **labels}
    exp_id = store.create_experiment(
        command=["vmtax", "import", str(file)],
        suite="import",
        seed=0,
        plan={
            "imported_from": file.name,
            "probe": header.probe,
            "runs": header.runs,
            "stream_sha256": digest,
        },
        vmtax_version=__version__,
        agent_version=header.agent_version,
    )
    cfg = store.configuration(
        experiment_id=exp_id,
        level=level,
        labels=labels,
        fingerprint=header.env.model_dump(mode="json"),
        target=f"import:{file.name}",
        provenance={"imported_from": str(file), "agent_started_at": header.started_at},
    )
    add_run = partial(store.add_run, experiment_id=exp_id, configuration_id=cfg,
                      probe=header.probe, plan_index=0, header=dumped)  # fmt: skip
    for run in stream.runs:
        add_run(run_index=run.summary.run,
                      summary=run.summary.model_dump(mode="json"), values=run.values,
                      warmup_values=run.warmup_values, status="ok")  # fmt: skip
    whole = {run.summary.run for run in stream.runs}
    # Runs the header promised that never completed: the unfinished one(s) and any after them,
    # when the stream broke off (a stream that ended properly with fewer runs lost none).
    missing = [] if stream.end is not None else sorted(set(range(header.runs)) - whole)
    empty = _empty()
    for run_index in missing:
        add_run(run_index=run_index, summary=None, values=empty,
                      warmup_values=empty, status="lost",
                      error=f"{header.probe}: {stream.problem}")  # fmt: skip
    status = "ok" if stream.complete else "failed"
    store.finish_experiment(exp_id, status)
    return exp_id, len(missing)


def stream_digest(header: Header, stream: ProbeStream) -> str:
    """SHA-256 of a stream's header and every run's samples: what makes two imports the same."""
    h = hashlib.sha256()
    h.update(json.dumps(header.model_dump(mode="json", by_alias=True), sort_keys=True).encode())
    for run in stream.runs:
        h.update(str(run.summary.run).encode())
        h.update(run.values.astype("<f8").tobytes())
        h.update(run.warmup_values.astype("<f8").tobytes())
    return h.hexdigest()


def _holding(store: Store, digest: str) -> int | None:
    """The experiment an earlier import of the same stream made, if any."""
    found = store.experiments()
    for exp_id in found.loc[found["suite"] == "import", "experiment_id"]:
        plan = store.experiment(int(exp_id)).get("plan") or {}
        if plan.get("stream_sha256") == digest:
            return int(exp_id)
    return None


def _empty() -> np.ndarray:
    return np.empty(0, dtype=np.float64)
