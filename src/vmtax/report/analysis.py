"""From a ReportInput to a ReportModel: calls vmtax.stats for every number and prepares the
figures. This module selects, orders and shapes; it computes no statistic itself."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from vmtax.errors import UsageError
from vmtax.report import exits, figures, prediction, refdata, words
from vmtax.report.apps import study_c_table
from vmtax.report.compare_format import fmt_ci, fmt_p, fmt_ratio
from vmtax.report.forked import run_forked, workers_for
from vmtax.report.inputs import ReportInput
from vmtax.report.parts import FigureSpec, Table
from vmtax.report.terminal import P95_NOTE, fmt, p95_below_mean, pct
from vmtax.stats.artifacts import (
    Artifacts,
    as_matrix,
    control_family,
    detect,
    family_resamples,
    load_tests,
    tests_with_p,
)
from vmtax.stats.compare import COLUMNS, compare
from vmtax.stats.compare_options import CompareOptions
from vmtax.stats.describe import describe

if TYPE_CHECKING:
    from vmtax.report.sweep import Section

LEVEL_ORDER = {"L0": 0, "L1": 1, "L2": 2, "L3": 3}
PARALLEL_CELLS = 200_000  # below this many samples a process pool costs more than it saves


@dataclass
class ReportModel:
    title: str
    generated_at: str
    baseline: str
    baseline_configs: list[str]
    summary: list[str]
    overhead_table: Table | None
    studya_tables: list[Table]
    figures: list[FigureSpec]
    artifacts: list[words.Finding]
    environment: Table
    config_provenance: list[tuple[str, list[tuple[str, str]]]]
    experiments: list[list[tuple[str, str]]]
    report_command: str
    warnings: list[str]
    #: Overcommitment sweeps among the selected experiments (report/sweep.py Section).
    sweeps: tuple[Section, ...] = ()
    prediction: Table | None = None  # the nested-cost model's table (report/prediction.py)
    exit_tables: list[Table] = field(default_factory=list)  # report/exits.py
    #: What the study-A tables' columns mean, said once for all of them.
    studya_note: str = ""


def _config_order(runs: pd.DataFrame) -> list[str]:
    first = runs.drop_duplicates("config")
    keyed = sorted(
        first.itertuples(index=False),
        key=lambda r: (LEVEL_ORDER.get(str(r.level).upper(), 9), str(r.config)),
    )
    return [str(r.config) for r in keyed]


def default_baseline(runs: pd.DataFrame) -> str:
    """Without --baseline, compare against the lowest level present (L0 when there is one)."""
    levels = sorted({str(v) for v in runs["level"]}, key=lambda v: (LEVEL_ORDER.get(v, 9), v))
    if not levels:
        raise UsageError("no runs match the selectors")
    return f"level={levels[0]}"


def build(
    data: ReportInput,
    *,
    options: CompareOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> ReportModel:
    """Run the statistics on ``data`` and lay out every section of the report (``progress``
    is told each step's name as it starts); ``options`` are its comparison's, as `vmtax
    compare`'s (the seed is the artifact checks' too)."""
    options = options or CompareOptions()
    runs = data.runs
    if runs.empty or not (runs["status"] == "ok").any():
        raise UsageError("no completed runs match the selectors: nothing to report")
    raw = runs[runs["status"] == "ok"]
    # Name configurations as compare does, so that its rows, describe's rows and the figures
    # agree when one key occurs in several experiments.
    ok = raw.assign(config=_display_keys(raw))
    order = _config_order(ok)
    colors = figures.palette(order)
    progress = progress or (lambda _step: None)
    progress("statistics")
    baseline, all_rows, notes = _comparison(data, raw, options)
    # The headline metric is the per-iteration mean (response time), exactly as `vmtax compare`
    # computes and prints it; throughput rows only feed the ΔL(n−1) column of the tables.
    all_rows = _sorted(all_rows, order)
    rows = all_rows[all_rows["metric"] == "mean"].reset_index(drop=True)
    described = _sorted(describe(ok), order)
    baseline_configs = list(dict.fromkeys(rows.loc[rows["is_baseline"].astype(bool), "config"]))
    warnings = notes + _grouped_warnings(rows)

    figs: list[FigureSpec] = []
    probes = list(dict.fromkeys(described["probe"]))
    for probe in probes:
        sub = described[described["probe"] == probe]
        throughput = bool(sub["throughput_mean"].notna().any())
        figs.append(
            FigureSpec(
                key=f"levels-{_slug(probe)}",
                section="levels",
                title=f"{probe}: "
                + ("throughput and response time" if throughput else "response time")
                + " by configuration",
                caption="Bars are means over runs; error bars are 95% confidence intervals of "
                "the mean (runs are the independent unit)."
                + ("" if throughput else " This probe reports no throughput."),
                draw=partial(figures.level_bars, sub, probe, colors),
            )
        )
    per_probe = rows[rows["probe"] != "geomean"]
    if not per_probe.empty:
        figs.append(
            FigureSpec(
                key="overhead",
                section="overhead",
                title="Overhead vs baseline per probe",
                caption=f"Each bar is one configuration's overhead relative to {baseline} "
                "(1.0 = same cost as the baseline, above 1 = slower); whiskers are "
                "95% confidence intervals.",
                draw=partial(figures.overhead_bars, per_probe, colors),
            )
        )
    matrices = _matrices(ok, data.samples, order)
    progress("timing artifacts")
    results = _detect_all(matrices, baseline_configs, detect, as_matrix, options.seed)
    progress("figures")
    sample_figs, findings = _sample_figures(probes, described, matrices, results, colors)
    figs.extend(sample_figs)
    sweep = _sweep(described, ok)
    if sweep is not None:
        figs.append(sweep)
    exit_figs, exit_tables = exits.section(data.exit_profiles)
    figs.extend(exit_figs)
    figs.extend(exits.explain_figures(exits.explained(runs, data.exit_profiles, data.tsc_hz)))
    figs.extend(_reference_figures())

    return ReportModel(
        title=_title(data),
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        baseline=baseline,
        baseline_configs=baseline_configs,
        summary=words.summary(rows) if baseline else notes[:1] or [_NO_BASELINE],
        overhead_table=_overhead_table(rows, order),
        studya_tables=[*_studya_tables(described, all_rows), *study_c_table(ok, baseline_configs)],
        studya_note=_studya_note(described),
        figures=figs,
        artifacts=findings,
        environment=_environment(data.configurations, order),
        config_provenance=_config_provenance(data.configurations, order),
        experiments=[_experiment(e) for e in data.experiments],
        report_command=shlex.join(data.command) if data.command else "",
        warnings=warnings,
        prediction=prediction.table(data),
        exit_tables=exit_tables,
    )


def _sample_figures(
    probes: Sequence[str],
    described: pd.DataFrame,
    matrices: Mapping[str, Mapping[str, list[np.ndarray]]],
    results: Mapping[tuple[str, str], Artifacts],
    colors: Mapping[str, str],
) -> tuple[list[FigureSpec], list[words.Finding]]:
    """Per probe: the latency distribution, the run x iteration mesh and the artifacts."""
    figs: list[FigureSpec] = []
    findings: list[words.Finding] = []
    for probe in probes:
        unit = str(described.loc[described["probe"] == probe, "unit"].iloc[0])
        series = {
            c: np.concatenate([r for r in m if r.size])
            for c, m in matrices.get(probe, {}).items()
            if any(r.size for r in m)
        }
        if series:
            figs.append(
                FigureSpec(
                    key=f"dist-{_slug(probe)}",
                    section="distribution",
                    title=f"{probe}: latency distribution",
                    caption=f"Histogram of every measured iteration ({figures.HIST_BINS} fixed "
                    "bins), one outline per configuration; heights are fractions of "
                    "that configuration's iterations.",
                    draw=partial(figures.distribution, probe, unit, series, colors),
                )
            )
        panels = []
        for config, run_values in matrices.get(probe, {}).items():
            result = results.get((probe, config))
            if result is None:
                continue
            findings.append(words.finding(probe, config, result))
            periodic = getattr(result, "periodic", None)
            panels.append(
                figures.HeatPanel(
                    config=config,
                    matrix=_ragged(run_values),
                    periodic=list(_get(periodic, "indices") or [])
                    if _get(periodic, "found")
                    else [],
                    period=_get(periodic, "period"),
                )
            )
        if panels:
            figs.append(
                FigureSpec(
                    key=f"mesh-{_slug(probe)}",
                    section="mesh",
                    title=f"{probe}: run × iteration mesh",
                    caption="Each row is a run, each column an iteration; colour is the value "
                    f"(the maximum of each block when there are more than "
                    f"{figures.MAX_CELLS} runs or iterations, so spikes survive). "
                    "Triangles (ticks when crowded) mark iteration indices found slow "
                    "in nearly every run; beside a reduced mesh, the first "
                    f"{figures.ZOOM} iterations are shown cell by cell.",
                    draw=partial(figures.heatmap, probe, unit, panels),
                    shares=("mesh", *figures.mesh_layout(panels)),
                )
            )
    return figs, findings


def _grouped_warnings(rows: pd.DataFrame) -> list[str]:
    """compare's per-row warnings, one line per (configuration, message) listing the probes."""
    probes: dict[tuple[str, str], list[str]] = {}
    for r in rows.itertuples(index=False):
        if r.probe == "geomean":
            continue
        for w in str(r.warnings or "").split("; "):
            if w:
                probes.setdefault((str(r.config), w), []).append(str(r.probe))
    return [
        f"{config}: {message} ({', '.join(names)})" for (config, message), names in probes.items()
    ]


def _display_keys(ok: pd.DataFrame) -> pd.Series:
    """The config key, prefixed "#<exp> " when it occurs in several experiments."""
    exps = ok.groupby("config")["experiment_id"].transform("nunique")
    prefixed = "#" + ok["experiment_id"].astype(str) + " " + ok["config"].astype(str)
    return prefixed.where(exps > 1, ok["config"].astype(str))


def _get(obj: Any, name: str) -> Any:  # noqa: ANN401
    if obj is None:
        return None
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-") or "x"


def _sorted(frame: pd.DataFrame, order: Sequence[str]) -> pd.DataFrame:
    """Rows in the report's configuration order (unknown configurations last)."""
    rank = {c: i for i, c in enumerate(order)}
    key = frame["config"].map(lambda c: rank.get(c, len(rank)))
    return (
        frame.assign(_rank=key)
        .sort_values("_rank", kind="stable")
        .drop(columns="_rank")
        .reset_index(drop=True)
    )


def _matrices(
    ok: pd.DataFrame, samples: Mapping[int, np.ndarray], order: Sequence[str]
) -> dict[str, dict[str, list[np.ndarray]]]:
    """probe -> config -> the runs' value arrays in run order."""
    out: dict[str, dict[str, list[np.ndarray]]] = {}
    sort_cols = [c for c in ("experiment_id", "plan_index", "run_index", "run_id") if c in ok]
    for (probe, config), group in ok.sort_values(sort_cols).groupby(
        ["probe", "config"], sort=False
    ):
        arrays = [
            np.asarray(samples.get(int(r), np.array([])), dtype=np.float64) for r in group["run_id"]
        ]
        out.setdefault(str(probe), {})[str(config)] = [a for a in arrays if a.size]
    return {p: {c: by_cfg[c] for c in order if c in by_cfg} for p, by_cfg in out.items()}


def _detect_all(
    matrices: Mapping[str, Mapping[str, list[np.ndarray]]],
    baseline_configs: Sequence[str],
    detect: Callable[..., Artifacts],
    as_matrix: Callable[[list[np.ndarray]], np.ndarray],
    seed: int,
) -> dict[tuple[str, str], Artifacts]:
    """Artifact detection for every (probe, config) with two runs or more.

    The detectors are single-threaded numpy (FFT under the GIL), so large inputs go to
    forked processes, one per core.
    """
    jobs = {}
    for probe, by_cfg in matrices.items():
        base_cfg = next((c for c in baseline_configs if c in by_cfg), None)
        base = as_matrix(by_cfg[base_cfg]) if base_cfg else None
        for config, run_values in by_cfg.items():
            if len(run_values) >= 2:
                jobs[(probe, config)] = (
                    as_matrix(run_values),
                    None if config == base_cfg else base,
                )

    cells = sum(m.size for m, _ in jobs.values())
    # One family: every test of every (probe, config) in this report that can give a p-value.
    family = sum(tests_with_p(m, b) for m, b in jobs.values())
    resamples = family_resamples(family)
    calls = [
        partial(detect, m, b, seed=seed, resamples=resamples, family=family)
        for m, b in jobs.values()
    ]
    if workers_for(len(calls)) < 2 or cells < PARALLEL_CELLS:
        found = {key: call() for key, call in zip(jobs, calls, strict=True)}
    else:
        load_tests(jobs.values())  # here, once, rather than in every worker
        found = dict(zip(jobs, run_forked(calls), strict=True))
    control_family(list(found.values()))
    return found


_NO_BASELINE = (
    "No baseline was given and one configuration was selected, so nothing is compared: the "
    "tables, distributions, artifacts and environment below describe it alone. To compare "
    "levels, measure several (vmtax run --levels L0,L1) and add --baseline level=L0."
)


def _comparison(
    data: ReportInput, raw: pd.DataFrame, options: CompareOptions
) -> tuple[str, pd.DataFrame, list[str]]:
    """The comparison rows: the headline (metric auto) computed exactly as `vmtax compare`
    computes it, with the same baseline, family of tests and options, so both print one
    number; then throughput, for the ΔL(n−1) column only. No baseline and one
    configuration: none."""
    base: str | pd.Series | None = data.baseline_mask
    label = data.baseline
    if base is None:
        if raw["configuration_id"].nunique() < 2:
            return "", pd.DataFrame(columns=COLUMNS), []
        label = default_baseline(raw)
        base = label
        lowest = raw[raw["level"].astype(str) == label.removeprefix("level=")]
        if options.by:
            why = (
                f"No baseline was given for --by {options.by}, so nothing is compared: the "
                "sections below describe every configuration. Name one value, e.g. "
                f"--baseline {options.by}=NAME."
            )
            return "", pd.DataFrame(columns=COLUMNS), [why]
        if lowest.groupby("probe")["configuration_id"].nunique().max() > 1:
            # Several hosts (a fleet) at the lowest level: none of them is the baseline by
            # default. Describe them all, and say how to compare.
            why = (
                f"No baseline was given and the lowest level, {label}, has "
                f"{lowest['configuration_id'].nunique()} configurations (hosts), so nothing "
                "is compared: the sections below describe each. Name one with --baseline "
                "(e.g. --baseline host=NAME), or compare inventory groups with --by group "
                "--baseline group=NAME."
            )
            return "", pd.DataFrame(columns=COLUMNS), [why]
    # Adaptive sampling's misses get no verdict, as in compare.
    same = partial(compare, data.runs, base, options=options, label=label,
                   imprecise=data.imprecise)  # fmt: skip
    try:
        head = same(metric="auto")
    except UsageError as exc:
        if not exc.message.startswith("nothing to compare"):
            raise
        # Only the baseline was selected: describe it, say so.
        return str(label), pd.DataFrame(columns=COLUMNS), [exc.message]
    frames, notes = [head.rows], list(head.warnings)
    if pd.to_numeric(raw["throughput"], errors="coerce").notna().any():
        try:
            thr = same(metric="throughput")
            frames.append(thr.rows[thr.rows["probe"] != "geomean"])
        except UsageError:
            pass  # no probe has throughput on both sides: the ΔL(n−1) cells stay empty
    return str(label), pd.concat(frames, ignore_index=True), notes


def _ragged(run_values: Sequence[np.ndarray]) -> np.ndarray:
    """Runs x iterations for drawing: shorter runs are padded with NaN (drawn empty)."""
    width = max(len(r) for r in run_values)
    out = np.full((len(run_values), width), np.nan)
    for i, r in enumerate(run_values):
        out[i, : len(r)] = r
    return out


def _fmt(x: Any, digits: int = 4) -> str:  # noqa: ANN401
    del digits
    return fmt(x)


def _pct(x: Any) -> str:  # noqa: ANN401
    return pct(x)


def _err(stderr: Any, pct: Any) -> str:  # noqa: ANN401
    text = _fmt(stderr)
    return text if text == "-" else f"{text} ({_pct(pct)})"


def _studya_tables(described: pd.DataFrame, rows: pd.DataFrame) -> list[Table]:
    tables = []
    deltas = {
        (str(probe), str(metric), str(config)): delta_prev_pct
        for probe, metric, config, delta_prev_pct in zip(
            rows["probe"], rows["metric"], rows["config"], rows["delta_prev_pct"], strict=True
        )
    }

    def delta(probe: str, metric: str, config: str) -> str:
        value = deltas.get((probe, metric, config), np.nan)
        return f"{value:+.2f}%" if np.isfinite(value) else "-"

    for probe, sub in described.groupby("probe", sort=False):
        tunit = next((u for u in sub["throughput_unit"] if isinstance(u, str) and u), "")
        unit = str(sub["unit"].iloc[0])
        body = []
        for r in sub.itertuples(index=False):
            body.append(
                [
                    str(r.config),
                    str(r.n_runs),
                    _fmt(r.throughput_mean),
                    delta(str(probe), "throughput", str(r.config)),
                    _err(r.throughput_stderr, r.throughput_stderr_pct),
                    _fmt(r.resp_mean),
                    delta(str(probe), "mean", str(r.config)),
                    _err(r.resp_stderr, r.resp_stderr_pct),
                    _fmt(r.p95),
                ]
            )
        tables.append(
            Table(
                title=str(probe),
                columns=[
                    "Configuration",
                    "Runs",
                    f"Throughput ({tunit or 'n/a'})",
                    "ΔL(n−1)",
                    "StdErr (StdErr%)",
                    f"Resp. mean ({unit})",
                    "ΔL(n−1)",
                    "StdErr (StdErr%)",
                    f"p95 ({unit})",
                ],
                rows=body,
                numeric=[False] + [True] * 8,
            )
        )
    return tables


def _studya_note(described: pd.DataFrame) -> str:
    """The study-A tables' note, once for all of them (it was repeated under each): what
    ΔL(n−1) is, and why a p95 can be below the mean, naming the probes where it is."""
    note = (
        "ΔL(n−1): relative change from the nearest lower level of the same configuration "
        "chain (study A)."
    )
    skewed = [str(p) for p, sub in described.groupby("probe", sort=False) if p95_below_mean(sub)]
    if skewed:
        note += f" {P95_NOTE} A p95 is below the mean for: {', '.join(skewed)}."
    return note


#: More experiments than this are named by their count and range in the title.
TITLE_EXPERIMENTS = 6


def _title(data: ReportInput) -> str:
    """The report's title names its experiments by number, not by the selector that found
    them (``exp=latest`` says nothing once another experiment is made); selectors that
    pick less than whole experiments follow in brackets."""
    ids = [str(e["id"]) for e in data.experiments if e.get("id") is not None]
    if not ids:
        return "vmtax report: " + (", ".join(data.selectors) or "all results")
    if len(ids) == 1:
        head = f"experiment {ids[0]}"
    elif len(ids) <= TITLE_EXPERIMENTS:
        head = f"experiments {', '.join(ids)}"
    else:
        head = f"{len(ids)} experiments, {ids[0]} to {ids[-1]}"
    narrower = [
        s for s in data.selectors if not all(t.strip().startswith("exp=") for t in s.split(","))
    ]
    return f"vmtax report: {head}" + (f" ({'; '.join(narrower)})" if narrower else "")


def _overhead_table(rows: pd.DataFrame, order: Sequence[str]) -> Table | None:
    body = []
    for r in rows.itertuples(index=False):
        if bool(r.is_baseline):
            continue
        body.append(
            [
                str(r.probe),
                str(r.config),
                f"{fmt_ratio(r.overhead)}×",
                f"{fmt_ci(r.ci_low, r.ci_high)}×",
                fmt_p(r.p_adjusted) or "-",
                words.short_verdict(str(r.verdict)),
                str(r.boots),
                _share(r.between_share),
                _count(r.runs_per_boot),
            ]
        )
    if not body:
        return None
    return Table(
        title="Overhead per probe",
        columns=[
            *("Probe", "Configuration", "Overhead", "95% CI", "p (adjusted)", "Verdict"),
            *("Boots", "Between-boot share", "Runs per boot (Kalibera & Jones)"),
        ],
        rows=body,
        numeric=[False, False, True, True, True, False, True, True, True],
        nowrap=[False, False, False, False, False, True, False, False, False],
    )


def _share(x: object) -> str:
    """A variance share in percent; '-' when it is undefined (one boot)."""
    return f"{100 * x:.0f}%" if isinstance(x, float | int) and np.isfinite(x) else "-"


def _count(x: object) -> str:
    return str(int(x)) if isinstance(x, float | int) and np.isfinite(x) else "-"


def _flatten(obj: Any, prefix: str = "", *, argv: bool = False) -> dict[str, str]:  # noqa: ANN401
    """Nested dicts to dotted keys. Lists are joined with "; ", or shell-quoted when
    ``argv`` (provenance lists are command lines)."""
    if isinstance(obj, Mapping):
        out: dict[str, str] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k), argv=argv))
        return out
    if isinstance(obj, list | tuple):
        if argv and all(isinstance(x, str | int | float) for x in obj):
            return {prefix: shlex.join(str(x) for x in obj)}
        return {prefix: "; ".join(str(x) for x in obj)}
    return {prefix: "-" if obj is None else str(obj)}


def _environment(configs: pd.DataFrame, order: Sequence[str]) -> Table:
    by_cfg = {str(r["config"]): r for _, r in configs.iterrows()} if len(configs) else {}
    names = [c for c in order if c in by_cfg] + [c for c in by_cfg if c not in order]
    flat = {}
    for name in names:
        row = by_cfg[name]
        flat[name] = {
            "level": str(row.get("level", "")),
            "target": str(row.get("target", "")),
            **{f"label.{k}": str(v) for k, v in (row.get("labels") or {}).items()},
            **_flatten(row.get("fingerprint") or {}),
        }
    keys = list(dict.fromkeys(k for f in flat.values() for k in f))
    body = []
    for key in keys:
        values = [flat[n].get(key, "-") for n in names]
        body.append([key, *values, "differs" if len(set(values)) > 1 else ""])
    return Table(title="Environment fingerprints", columns=["Field", *names, ""], rows=body)


def _config_provenance(
    configs: pd.DataFrame, order: Sequence[str]
) -> list[tuple[str, list[tuple[str, str]]]]:
    out = []
    for _, row in configs.iterrows():
        prov = row.get("provenance") or {}
        items = list(_flatten(prov, argv=True).items())
        out.append((str(row["config"]), items))
    rank = {c: i for i, c in enumerate(order)}
    return sorted(out, key=lambda x: rank.get(x[0], len(rank)))


def _experiment(exp: Mapping[str, Any]) -> list[tuple[str, str]]:
    command = exp.get("command") or []
    items = [
        ("experiment", str(exp.get("id", "-"))),
        ("command", shlex.join(str(c) for c in command) if command else "-"),
        ("suite", str(exp.get("suite", "-"))),
        ("seed", str(exp.get("seed", "-"))),
        ("status", str(exp.get("status", "-"))),
        ("vmtax version", str(exp.get("vmtax_version", "-"))),
        ("agent version", str(exp.get("agent_version") or "-")),
        ("host", str(exp.get("host") or "-")),
        ("started", str(exp.get("started_at") or "-")),
        ("ended", str(exp.get("ended_at") or "-")),
        ("plan", json.dumps(exp.get("plan") or {}, sort_keys=True, default=str)),
    ]
    return items


SWEEP_KEYS = ("overcommit", "ratio", "vcpus", "guests", "triplets", "smp")


def _sweep(described: pd.DataFrame, ok: pd.DataFrame) -> FigureSpec | None:
    """A scaling curve when the user's configurations sweep a numeric label."""
    labels = ok.drop_duplicates("config").set_index("config")["labels"]
    for key in SWEEP_KEYS:
        xs = {c: _number((lab or {}).get(key)) for c, lab in labels.items()}
        xs = {c: x for c, x in xs.items() if x is not None}
        if len(set(xs.values())) < 3:
            continue
        sub = described[described["config"].isin(xs)].copy()
        sub["x"] = sub["config"].map(xs)
        metric = "throughput" if sub["throughput_mean"].notna().any() else "resp"
        sub["y"] = sub[f"{metric}_mean"]
        sub["yerr"] = (sub[f"{metric}_ci_high"] - sub[f"{metric}_mean"]).fillna(0)
        sub["series"] = sub["probe"] + " @ " + sub["level"].astype(str)
        return FigureSpec(
            key=f"sweep-{key}",
            section="scaling",
            title=f"Scaling with {key}",
            caption=f"Mean {metric} against the '{key}' label; bars are 95% CIs.",
            draw=partial(
                figures.scaling,
                sub[["series", "x", "y", "yerr"]],
                x_label=key,
                y_label=f"mean {metric}",
                title=f"Scaling with {key}",
            ),
        )
    return None


def _number(value: Any) -> float | None:  # noqa: ANN401
    try:
        text = str(value).split(":")[0] if value is not None else ""
        return float(text)
    except ValueError:
        return None


def _reference_figures() -> list[FigureSpec]:
    exits = refdata.virtage_exit_profile()
    curves, guide = refdata.fitzgerald_cpu_scaling()
    return [
        FigureSpec(
            key="ref-exits",
            section="exits",
            reference=True,
            title="Exit-reason breakdown (reference: study E, Virtage Table 2)",
            caption="Published data, not your measurements: VM-exit handling time by reason "
            "group with shadow page tables (SPT) and with EPT, normalised to the SPT "
            "total. EPT removes the page-fault and CR-access exits.",
            draw=partial(
                figures.exit_reasons,
                exits,
                title="Exit-handling time by reason group, normalised to SPT",
            ),
        ),
        FigureSpec(
            key="ref-scaling",
            section="scaling",
            reference=True,
            title="Scaling curve (reference: study A, Tables 5–6)",
            caption="Published data, not your measurements: sysbench cpu throughput with "
            "the vCPUs each level had when not over-committed (L0 4, L1 3, L2 2); "
            "error bars are the published standard errors, dashed lines are "
            "throughput proportional to vCPUs. Over-committed (4 vCPUs at every "
            "level) the same test stays within a few percent of L0.",
            draw=partial(
                figures.scaling,
                curves,
                reference=guide,
                x_label="vCPUs of the guest",
                y_label="TPSec (events/s)",
                title="CPU throughput scales with vCPUs, not levels",
            ),
        ),
    ]
