"""The import use case: saved agent streams (``vmtax-probe run ... > FILE``) become one
experiment, checked record by record as a live run's stream is.

Every whole run is kept. A run whose own records are broken (a sample that is not a finite,
non-negative number, a summary whose n, min, max, mean or p95 disagree with the samples) is
stored as lost, and so is every run a stream that broke off had promised; the runs around
them are not touched. Runs with the same level and labels form one configuration, however
many streams (boots) they came from; each run keeps its stream's header, whose boot id says
which boot it ran in.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vmtax import infile
from vmtax.contract import Header, ProbeStream, read_stream
from vmtax.errors import UsageError, VmtaxError
from vmtax.runner import detected_labels
from vmtax.store import Store
from vmtax.targets.agent import list_probes
from vmtax.targets.local import LocalTarget
from vmtax.version import __version__
from vmtax.workloads import infos as workload_infos

LEVELS = ("L0", "L1", "L2", "L3")
_PROBE_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
#: Bounds on one stream: the agent writes a run's samples 4,096 to a record (under 100 kB),
#: and a 200 MB stream holds 50 M samples; past these it is not an agent's stream.
MAX_LINE_BYTES = 16 << 20
MAX_STREAM_BYTES = 64 << 30
#: Runs stored in one transaction (a stream of thousands of short runs commits once per
#: batch, not once per run), and the samples a batch holds at most (its memory).
_BATCH_RUNS = 1000
_BATCH_SAMPLES = 4_000_000
#: A summary statistic and the samples' own may differ by float rounding (the agent sums in
#: another order than numpy), never by more than this share.
_REL_TOL = 1e-7


@dataclass
class Source:
    """One saved stream, read and checked: its whole runs, and the runs it lost and why."""

    path: Path
    stream: ProbeStream
    header: Header
    digest: str
    lost: dict[int, str] = field(default_factory=dict)


@dataclass
class Imported:
    """What an import stored: the experiment (or the one that already held the streams), in
    ``store``, which the caller closes."""

    store: Store
    experiment_id: int
    already_held: bool = False
    kept: int = 0
    lost: int = 0
    problems: list[str] = field(default_factory=list)


def import_files(
    paths: Sequence[Path],
    *,
    level: str = "L0",
    labels: dict[str, str] | None = None,
    db: str | None = None,
    allow_duplicate: bool = False,
    say: Callable[[str], None] = infile.say_on_stderr,
) -> Imported:
    """`vmtax import`: check the options, read and check every stream, and only then open
    the store (so an import refused leaves no store) and store them as one experiment."""
    if level not in LEVELS:
        raise UsageError(f"--level must be L0, L1, L2 or L3, got {level!r}")
    sources = read_sources(paths, say)
    store = Store.open(db)
    try:
        return import_streams(
            store, sources, level=level, labels=labels or {}, allow_duplicate=allow_duplicate
        )
    except BaseException:
        store.close()
        raise


def read_sources(
    paths: Sequence[Path], say: Callable[[str], None] = infile.say_on_stderr
) -> list[Source]:
    """Read and check every stream before anything is stored (UsageError for a file that
    cannot be read, is not a stream, or is the same stream twice)."""
    if not paths:
        raise UsageError("give at least one saved stream to import")
    out: list[Source] = []
    for path in paths:
        try:
            with infile.lines(
                path, say=say, max_line=MAX_LINE_BYTES, max_bytes=MAX_STREAM_BYTES
            ) as got:
                stream = read_stream(got, keep_going=True)
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
        except infile.TooLong as exc:
            raise UsageError(f"{path} is not a vmtax-probe stream: {exc}") from None
        if stream.header is None:
            raise UsageError(f"{path} is not a vmtax-probe stream: {stream.problem}")
        _check_probe(path, stream.header.probe)
        if stream.wrong_unit is not None:
            raise UsageError(f"{path} is not one stream: {stream.wrong_unit}")
        if stream.end is not None and stream.end.status == "error":
            said = (stream.end.error or "no reason given").strip().splitlines()
            raise UsageError(
                f"{path}: its end record says the agent failed ({said[0][:200] if said else ''}"
                f"); not imported"
            )
        source = Source(path, stream, stream.header, stream_digest(stream.header, stream))
        _check_summaries(source)
        source.lost = _lost_runs(source)
        twin = next((s for s in out if s.digest == source.digest), None)
        if twin is not None:
            raise UsageError(f"{path} and {twin.path} are the same stream; give it once")
        out.append(source)
    if not any(s.stream.runs for s in out):
        first = out[0]
        raise UsageError(
            f"nothing to import: no whole run in {', '.join(str(s.path) for s in out)} "
            f"({first.path}: {first.stream.problem})"
        )
    return out


def _check_probe(path: Path, probe: str) -> None:
    """The stream's probe is one this machine's agent (or a workload) has: a stream of a
    probe nobody offers cannot be compared with anything vmtax measures."""
    try:
        known = {p.name for p in [*list_probes(LocalTarget()), *workload_infos()]}
    except VmtaxError:  # no agent here: the name's form is all that can be checked
        known = set()
    if (known and probe not in known) or not _PROBE_NAME.fullmatch(probe):
        raise UsageError(
            f"{path}: its header's probe {probe[:40]!r} is not one the agent has"
            + (f" ({', '.join(sorted(known))})" if known else "")
        )


def import_streams(
    store: Store,
    sources: list[Source],
    *,
    level: str,
    labels: dict[str, str],
    allow_duplicate: bool = False,
) -> Imported:
    """Store ``sources`` as one experiment, or find the one that already holds them."""
    digest = combined_digest([s.digest for s in sources])
    held = None if allow_duplicate else _holding(store, digest)
    if held is not None:
        return Imported(store, held, already_held=True)
    exp_id = store.create_experiment(
        command=["vmtax", "import", *(str(s.path) for s in sources)],
        suite="import",
        seed=0,
        plan={
            "imported_from": [s.path.name for s in sources],
            "streams": [
                {
                    "file": s.path.name,
                    "probe": s.header.probe,
                    "runs": s.header.runs,
                    "stream_sha256": s.digest,
                }
                for s in sources
            ],  # fmt: skip
            "stream_sha256": digest,
        },
        vmtax_version=__version__,
        agent_version=sources[0].header.agent_version,
    )
    try:
        done = _store_configurations(store, exp_id, sources, level, labels)
    except BaseException:
        # Ctrl-C or a store error half way: the runs stored so far stay, marked as such.
        with contextlib.suppress(Exception):
            store.finish_experiment(exp_id, "interrupted")
        raise
    store.finish_experiment(exp_id, "failed" if done.lost or done.problems else "ok")
    return done


def _store_configurations(
    store: Store, exp_id: int, sources: list[Source], level: str, labels: dict[str, str]
) -> Imported:
    groups = _configurations(sources, level, labels)
    done = Imported(store, exp_id)
    for cfg_level, cfg_labels, members in groups:
        cfg = store.configuration(
            experiment_id=exp_id,
            level=cfg_level,
            labels=cfg_labels,
            fingerprint=members[0][1].header.env.model_dump(mode="json"),
            target=_target([s for _, s in members]),
            provenance={
                "imported_from": [str(s.path) for _, s in members],
                "agent_started_at": [s.header.started_at for _, s in members],
            },
        )
        for position, source in members:
            kept, lost = _store_runs(store, exp_id, cfg, position, source)
            done.kept += kept
            done.lost += lost
            if lost or source.stream.problem:
                done.problems.append(f"{source.path}: {_why(source)}")
    return done


def _configurations(
    sources: list[Source], level: str, labels: dict[str, str]
) -> list[tuple[str, dict[str, str], list[tuple[int, Source]]]]:
    """(level, labels, [(position, stream)]) per configuration, in the streams' order."""
    groups: dict[str, tuple[str, dict[str, str], list[tuple[int, Source]]]] = {}
    for position, source in enumerate(sources):
        found = {**detected_labels(source.header.env), **labels} if level == "L0" else labels
        key = json.dumps([level, sorted(found.items())])  # as the store keys configurations
        groups.setdefault(key, (level, dict(found), []))[2].append((position, source))
    return list(groups.values())


def _store_runs(
    store: Store, exp_id: int, cfg: int, position: int, source: Source
) -> tuple[int, int]:
    """One row per run: the whole ones ok, the lost ones with their reason. The stream's
    position among the imported files is its plan index, so two streams of one probe in one
    configuration (two boots) keep their run indices apart."""
    header = source.header.model_dump(mode="json", by_alias=True)
    probe = source.header.probe
    batch: list[dict[str, Any]] = []
    held = 0
    for run in source.stream.runs:
        batch.append(dict(
            experiment_id=exp_id, configuration_id=cfg, probe=probe, plan_index=position,
            run_index=run.summary.run, header=header,
            summary=run.summary.model_dump(mode="json"), values=run.values,
            warmup_values=run.warmup_values, status="ok",
        ))  # fmt: skip
        held += run.values.size + run.warmup_values.size
        if len(batch) >= _BATCH_RUNS or held >= _BATCH_SAMPLES:
            store.add_runs(batch)
            batch, held = [], 0
    empty = np.empty(0, dtype=np.float64)
    for run_index, reason in sorted(source.lost.items()):
        batch.append(dict(
            experiment_id=exp_id, configuration_id=cfg, probe=probe, plan_index=position,
            run_index=run_index, header=header, summary=None, values=empty,
            warmup_values=empty, status="lost", error=f"{probe}: {reason}",
        ))  # fmt: skip
    store.add_runs(batch)
    return len(source.stream.runs), len(source.lost)


def _check_summaries(source: Source) -> None:
    """A run whose summary disagrees with its own samples is broken: the table would show
    the summary, the intervals the samples."""
    whole = []
    for run in source.stream.runs:
        s, v = run.summary, run.values
        checks = {
            "min": (s.min, float(v.min())),
            "max": (s.max, float(v.max())),
            "mean": (s.mean, float(v.mean())),
            "p95": (s.p95, float(np.percentile(v, 95))),
        } if v.size else {}  # fmt: skip
        wrong = [
            f"its summary's {name} is {said!r}, its samples' {found!r}"
            for name, (said, found) in checks.items()
            if not np.isclose(said, found, rtol=_REL_TOL, atol=0.0)
        ]
        if wrong:
            source.stream.broken.setdefault(s.run, f"run {s.run}: {wrong[0]}")
            source.stream.problem = source.stream.problem or source.stream.broken[s.run]
        else:
            whole.append(run)
    source.stream.runs = whole


def _lost_runs(source: Source) -> dict[int, str]:
    """Every run the stream lost, with its reason: broken records, samples without a
    summary, and, when the stream broke off, the runs its header promised that never came
    (a stream that ended with fewer runs, e.g. interrupted, lost none of those)."""
    stream = source.stream
    lost = dict(stream.broken)
    for run in stream.lost_runs:
        lost.setdefault(run, f"run {run}: samples without a summary")
    whole = {r.summary.run for r in stream.runs}
    if stream.end is None:
        for run in range(source.header.runs):
            if run not in whole:
                lost.setdefault(run, "stream ended without an end record (truncated)")
    elif stream.end.status != "ok":  # timeout or interrupted: the runs it did not reach
        for run in range(source.header.runs):
            if run not in whole:
                lost.setdefault(run, f"the stream's end record says {stream.end.status}")
    return lost


def _why(source: Source) -> str:
    stream = source.stream
    broken = len(stream.broken)
    parts = []
    if broken:
        parts.append(f"{broken} run{'s' if broken != 1 else ''} with broken records "
                     f"(first: {next(iter(stream.broken.values()))})")  # fmt: skip
    if stream.end is None:
        parts.append("stream ended without an end record (agent killed or truncated output)")
    elif stream.end.status != "ok":
        parts.append(f"its end record says {stream.end.status} after "
                     f"{stream.end.runs_completed} of {source.header.runs} runs")  # fmt: skip
    elif not broken and stream.problem:
        parts.append(stream.problem)
    return "; ".join(parts) or "runs without a summary"


def _target(sources: list[Source]) -> str:
    names = ",".join(s.path.name for s in sources)
    return ("import:" + names)[:255]


def stream_digest(header: Header, stream: ProbeStream) -> str:
    """SHA-256 of a stream's header and every whole run's samples: what makes two imports
    the same."""
    h = hashlib.sha256()
    h.update(json.dumps(header.model_dump(mode="json", by_alias=True), sort_keys=True).encode())
    for run in stream.runs:
        h.update(str(run.summary.run).encode())
        h.update(run.values.astype("<f8").tobytes())
        h.update(run.warmup_values.astype("<f8").tobytes())
    return h.hexdigest()


def combined_digest(digests: list[str]) -> str:
    """One stream's digest as it is (as imports have always been keyed); several streams'
    digest is that of theirs, in order."""
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


def _holding(store: Store, digest: str) -> int | None:
    """The experiment an earlier import of the same streams made, if any."""
    found = store.experiments()
    for exp_id in found.loc[found["suite"] == "import", "experiment_id"]:
        plan = store.experiment(int(exp_id)).get("plan") or {}
        if plan.get("stream_sha256") == digest:
            return int(exp_id)
    return None
