"""A sweep's figures for people: throughput and response time against the overcommit ratio,
with their intervals and the utilisation beside them, as a terminal table, markdown, or an
HTML section with an inline SVG figure (labels escaped by Jinja2's autoescape)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
import matplotlib
from matplotlib.figure import Figure
from rich.table import Table

from vmtax.report.svg import RC, to_png, to_svg
from vmtax.report.terminal import fmt

if TYPE_CHECKING:
    from vmtax.sweep.summary import SweepSummary

HEADERS = (
    "ratio", "guests", "vCPUs", "throughput", "95% CI", "resp mean s", "resp p95 s",
    "host CPU", "guest CPU", "steal", "vCPU wait", "RSS MiB", "maj faults/s", "paged in MiB/s",
    "status",
)  # fmt: skip


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def paged_in(paging: dict[str, float] | None) -> float | None:
    """MiB/s of pages faulted back in after reclaim inside the memory cap (refaults of 4 KiB
    pages: file-backed guest RAM read back from its file, or anonymous from swap)."""
    if not paging:
        return None
    pages = paging.get("workingset_refault_file_per_s", 0.0)
    pages += paging.get("workingset_refault_anon_per_s", 0.0)
    return pages * 4096 / 2**20


def rows(summary: SweepSummary) -> list[list[str]]:
    out = []
    for s in summary.steps:
        ci = (
            "-"
            if s.throughput_low is None
            else f"{fmt(s.throughput_low)}..{fmt(s.throughput_high)}"
        )
        out.append(
            [
                f"{s.ratio:g}:1",
                str(s.guests),
                str(s.vcpus),
                fmt(s.throughput),
                ci,
                fmt(s.resp_mean_s),
                fmt(s.resp_p95_s),
                _pct(s.host_util),
                _pct(s.guest_util),
                _pct(s.steal),
                _pct(s.vcpu_wait),
                fmt(s.rss_mb),
                fmt(s.major_faults),
                fmt(paged_in(s.paging)),
                s.status if not s.error else f"{s.status}: {s.error}",
            ]
        )
    return out


def knee_words(summary: SweepSummary) -> str:
    """The knee in one sentence: the breakpoint and its 95% interval, the step beside them,
    and in words, with no ratio, a bend whose place the steps cannot give."""
    k = summary.knee
    if not k:
        return f"No knee: {summary.knee_reason}."
    where, _, why = summary.knee_reason.partition("; ")
    low, high = k.get("low"), k.get("high")
    span = ""
    if isinstance(low, float | int) and isinstance(high, float | int):
        span = f"95% interval {low:.3g} to {high:.3g}:1"
        ratios = [s.ratio for s in summary.steps if s.status == "ok"]
        if k.get("ratio") is not None and (low <= min(ratios) or high >= max(ratios)):
            span += ", to the sweep's end: one step on that side cannot place a bend"
    extra = "; ".join(v for v in (span, why) if v) or "no interval"
    ratio, step = k.get("ratio"), k.get("step")
    if not isinstance(ratio, float | int):
        return f"Throughput stops scaling, but {where}, so no ratio is estimated ({extra})."
    beside = f"; as a step, {step:g}:1" if isinstance(step, float | int) else ""
    return f"Throughput stops scaling at {ratio:.3g}:1 ({extra}{beside})."


def findings(summary: SweepSummary) -> list[str]:
    """The analysis in sentences."""
    out = []
    out.append(knee_words(summary))
    f = summary.flat
    if f:
        why = (
            "the host CPUs are saturated"
            if f["kind"] == "saturated"
            else "CPU is left idle (the limit is not the CPUs)"
        )
        guests = [
            s.guest_util
            for s in summary.steps
            if s.ratio in f["ratios"] and s.status == "ok" and s.guest_util is not None
        ]
        share = (
            f", of which the guests' QEMU processes used {100 * sum(guests) / len(guests):.1f}%"
            if guests
            else ""
        )
        out.append(
            f"After the knee host CPU utilisation averages {100 * f['utilisation']:.1f}% "
            f"({100 * f['low']:.1f} to {100 * f['high']:.1f}%){share}: flat because {why}."
        )
    r = summary.resp_rise_ratio
    if r is not None:
        out.append(
            f"Response time first rises significantly at {r:g}:1 "
            "(Holm-adjusted, vs the first step)."
        )
    elif summary.resp_rise_steps:
        p = min(p for _, _, p in summary.resp_rise_steps)
        out.append(
            f"A response-time rise over the first step: not detected (smallest Holm-adjusted "
            f"p = {p:.3g})."
        )
    else:
        out.append("A response-time rise over the first step: not tested (no replicates).")
    slo = summary.slo
    out.append(
        f"SLO p95 <= {slo['limit_s']:g} s holds up to {slo['max_ratio']:g}:1."
        if slo["max_ratio"] is not None
        else f"SLO p95 <= {slo['limit_s']:g} s fails from the first step."
    )
    paging = [s for s in summary.steps if (paged_in(s.paging) or 0) > 1.0]
    if paging:
        out.append(
            f"Paging inside the memory cap begins at {paging[0].ratio:g}:1 "
            f"({paged_in(paging[0].paging):.3g} MiB/s paged back in)."
        )
    failed = [s for s in summary.steps if s.status != "ok"]
    if failed:
        out.append(f"Step {failed[0].ratio:g}:1 failed: {failed[0].error}")
    return out


def terminal(summary: SweepSummary) -> Table:
    spec = summary.spec
    table = Table(
        title=f"Sweep {summary.experiment_id} ({spec['axis']} axis, {summary.throughput_unit}, "
        f"{summary.replicates} replicate(s) per step, order seed {summary.order_seed}, "
        f"{summary.status})",
        header_style="bold",
        caption=" ".join(findings(summary)),
    )
    for h in HEADERS:
        # The interval is the figure a reader needs whole; the others may wrap their header.
        wide = h in ("95% CI", "throughput")
        table.add_column(
            h,
            justify="left" if h == "status" else "right",
            no_wrap=wide,
            min_width=17 if wide else None,
        )
    for r in rows(summary):
        table.add_row(*r)
    return table


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(summary: SweepSummary) -> str:
    spec = summary.spec
    lines = [
        f"## Overcommitment sweep {summary.experiment_id}",
        "",
        f"Axis `{spec['axis']}`, workload `{spec['workload']}` ({summary.throughput_unit}), "
        f"window {spec['timing']['window_s']:g} s sampled every {spec['timing']['interval_s']:g} s "
        f"after {spec['timing']['warmup_s']:g} s of warm-up; {summary.replicates} replicate(s) "
        f"per step in a random order (seed {summary.order_seed}); status {summary.status}.",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "---|" * len(HEADERS),
    ]
    lines += ["| " + " | ".join(_md(c) for c in r) + " |" for r in rows(summary)]
    lines += ["", *(f"- {_md(f)}" for f in findings(summary)), ""]
    return "\n".join(lines)


def figure(summary: SweepSummary) -> Figure:
    """Throughput (with CI) and p95 response time against the ratio; host CPU beside them."""
    ok = [s for s in summary.steps if s.status == "ok" and s.throughput is not None]
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(9.0, 3.2))
        ax1, ax2, ax3 = fig.subplots(1, 3)
        x = [s.ratio for s in ok]
        y = [s.throughput for s in ok]
        lo = [t - (s.throughput_low or t) for s in ok if (t := s.throughput) is not None]
        hi = [(s.throughput_high or t) - t for s in ok if (t := s.throughput) is not None]
        ax1.errorbar(x, y, yerr=[lo, hi], marker="o", capsize=3, color="#1f77b4")
        ax1.set_title("Throughput")
        ax1.set_ylabel(summary.throughput_unit)
        if summary.knee:
            k = summary.knee
            if k["low"] is not None:
                ax1.axvspan(k["low"], k["high"], color="#ff7f0e", alpha=0.15, lw=0)
            if k["ratio"] is not None:
                ax1.axvline(k["ratio"], color="#ff7f0e", ls="--", lw=1, label="knee")
                ax1.legend()
        ax2.plot(x, [s.resp_p95_s for s in ok], marker="o", color="#d62728", label="p95")
        ax2.plot(x, [s.resp_mean_s for s in ok], marker=".", color="#9467bd", label="mean")
        ax2.axhline(summary.slo["limit_s"], color="#7f7f7f", ls=":", lw=1, label="SLO")
        ax2.set_title("Response time (s)")
        ax2.legend()
        for key, label, marker in (
            ("host_util", "host CPU", "o"),
            ("guest_util", "guests' CPU", "s"),
            ("vcpu_wait", "vCPU wait", "."),
        ):
            pts = [(s.ratio, 100 * getattr(s, key)) for s in ok if getattr(s, key) is not None]
            if pts:
                ax3.plot(*zip(*pts, strict=True), marker=marker, label=label)
        ax3.set_title("Utilisation (%)")
        ax3.set_ylim(0, 105)
        ax3.legend()
        for ax in (ax1, ax2, ax3):
            ax.set_xlabel("overcommit ratio (:1)")
        fig.tight_layout()
    return fig


_SECTION = jinja2.Environment(autoescape=True).from_string(
    """<section id="sweep-{{ s.experiment_id }}">
<h2>Overcommitment sweep {{ s.experiment_id }}</h2>
<p class="muted">Axis <code>{{ s.spec.axis }}</code>, workload <code>{{ s.spec.workload }}</code>
({{ s.throughput_unit }}); {{ s.spec.timing.warmup_s }} s warm-up, {{ s.spec.timing.window_s }} s
window sampled every {{ s.spec.timing.interval_s }} s; status {{ s.status }}.</p>
<figure>{{ svg | safe }}</figure>
<table><thead><tr>{% for h in headers %}<th>{{ h }}</th>{% endfor %}</tr></thead>
<tbody>{% for r in rows %}<tr>{% for c in r %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</tbody>
</table>
<ul>{% for f in findings %}<li>{{ f }}</li>{% endfor %}</ul>
</section>"""
)


def html_section(summary: SweepSummary) -> str:
    svg = to_svg(figure(summary), f"sweep-{summary.experiment_id}")
    return _SECTION.render(
        s=summary, svg=svg, headers=HEADERS, rows=rows(summary), findings=findings(summary)
    )


def png(summary: SweepSummary) -> bytes:
    return to_png(figure(summary))


@dataclass(frozen=True)
class Section:
    """A sweep as the report shows it (``report.html.j2`` / ``report.md.j2``)."""

    experiment_id: int
    html: str
    markdown: str


def sections(summaries: Sequence[SweepSummary]) -> tuple[Section, ...]:
    """The report's part of each sweep (``ReportInput.sweeps``, read by report/gather.py)."""
    return tuple(Section(s.experiment_id, html_section(s), markdown(s)) for s in summaries)


def standalone(parts: Sequence[Section], fmt: str) -> str:
    """A report of sweeps alone (the selectors picked no runs)."""
    if fmt == "markdown":
        return "# vmtax sweep report\n\n" + "\n".join(p.markdown for p in parts)
    css_path = Path(__file__).parent / "templates" / "report.css"
    css = css_path.read_text("utf-8") if css_path.is_file() else ""
    body = "\n".join(p.html for p in parts)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>vmtax sweep report</title><style>{css}</style></head>"
        f"<body><main>{body}</main></body></html>\n"
    )
