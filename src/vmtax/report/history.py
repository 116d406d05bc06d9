"""The HTML view of `vmtax history`: one small chart per probe (each experiment's overhead
with its 95% interval, in time order; found steps as vertical lines; fingerprint changes
annotated), then the table. It renders the History it is given and reads no store; every
label is escaped (Jinja2's autoescape; the charts are inline SVG whose text matplotlib
escapes)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import jinja2
import matplotlib
import numpy as np
from matplotlib.figure import Figure

from vmtax.report.svg import RC, to_svg

if TYPE_CHECKING:
    from vmtax.experiment.history import History, Point

_PAGE = jinja2.Environment(autoescape=True).from_string(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>vmtax history</title>
<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
figure{margin:0 0 1.5em}svg{max-width:100%;height:auto}table{border-collapse:collapse;
font-size:.85em}td,th{border-bottom:1px solid #ddd;padding:.2em .5em;text-align:left}
.found{font-weight:bold}.muted{color:#666}</style></head><body>
<h1>The tax over time</h1>
<p class="muted">Overhead of {{ selectors }} against {{ h.baseline }} in each stored
experiment, in the order they ran, with its 95% interval. Steps are proposed by ruptures on the
boot-level overheads and tested by permuting whole experiments (hierarchical
Benjamini-Hochberg across probes, alpha {{ alpha }}).</p>
{% for probe, svg, lines in charts %}<section><h2>{{ probe }}</h2>
<figure>{{ svg | safe }}</figure>
<ul>{% for l in lines %}<li>{{ l }}</li>{% endfor %}</ul></section>
{% endfor %}
{% if h.notes %}<h2>Notes</h2><ul>{% for n in h.notes %}<li>{{ n }}</li>{% endfor %}</ul>{% endif %}
<h2>Every experiment</h2>
<table><thead><tr>{% for c in head %}<th>{{ c }}</th>{% endfor %}</tr></thead><tbody>
{% for r in rows %}<tr>{% for c in r %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}
</tbody></table></body></html>
"""
)


def figure(probe: str, points: list[Point], history: History) -> Figure:
    """One probe's history: overhead and 95% interval per experiment, steps and changes."""
    x = np.arange(len(points))
    est = np.array([p.overhead for p in points])
    low = np.array([p.ci_low if math.isfinite(p.ci_low) else p.overhead for p in points])
    high = np.array([p.ci_high if math.isfinite(p.ci_high) else p.overhead for p in points])
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(7.0, 2.6))
        ax = fig.add_subplot()
        ax.errorbar(x, est, yerr=[est - low, high - est], fmt="o", ms=3, capsize=2,
                    color="#1f5fa8", label="overhead, 95% CI")  # fmt: skip
        ax.axhline(1.0, color="#999", lw=0.8)
        pos = {p.experiment_id: i for i, p in enumerate(points)}
        for s in history.steps:
            if s.probe == probe and s.found and s.after_id in pos:
                at = pos[s.after_id] - 0.5
                ax.axvline(at, color="#c0392b", lw=1.2)
                ax.annotate(f"step ×{s.ratio:.2f}", (at, 1.0), xycoords=("data", "axes fraction"),
                            ha="left", va="top", fontsize=7, color="#c0392b")  # fmt: skip
        for i, p in enumerate(points):
            if p.changes:
                ax.axvline(i - 0.5, color="#888", lw=0.8, ls=":")
                ax.annotate("\n".join(p.changes), (i - 0.45, 0.02),
                            xycoords=("data", "axes fraction"), fontsize=6, color="#555",
                            va="bottom")  # fmt: skip
        # Ratios on a log axis; an interval far wider than the estimates' spread (two boots
        # give a t with one degree of freedom) is cut at the view, not allowed to flatten it.
        ax.set_yscale("log")
        top, bottom = float(np.nanmax(est)), float(np.nanmin(est))
        ax.set_ylim(min(bottom, 1.0) / 3, max(top, 1.0) * 3)
        ax.set_xticks(x, [str(p.experiment_id) for p in points])
        ax.set_xlabel("experiment, in the order they ran")
        ax.set_ylabel(f"overhead vs {history.baseline} (log)")
        ax.set_title(probe)
        fig.tight_layout()
    return fig


def render_html(history: History) -> str:
    """The whole page."""
    by_probe: dict[str, list[Point]] = {}
    for p in history.points:
        by_probe.setdefault(p.probe, []).append(p)
    charts = []
    for probe, pts in by_probe.items():
        lines = [
            (
                f"step ×{s.ratio:.3f} between experiments {s.before_id} and {s.after_id} "
                f"(p = {s.p_value:.3g}, adjusted {s.p_adjusted:.3g})"
                + (f"; changed there: {', '.join(s.changes)}" if s.changes else "")
            )
            if s.found
            else (
                f"step not detected between experiments {s.before_id} and {s.after_id} "
                f"(p = {s.p_value:.3g}, adjusted {s.p_adjusted:.3g})"
            )
            for s in history.steps
            if s.probe == probe
        ]
        charts.append((probe, to_svg(figure(probe, pts, history), f"history-{probe}"), lines))
    head = ["probe", "experiment", "started", "config", "overhead", "95% CI", "boots", "verdict",
            "changed since the previous"]  # fmt: skip
    rows = [
        [p.probe, p.experiment_id, p.started[:19], p.config, f"{p.overhead:.3f}",
         f"[{p.ci_low:.3f}, {p.ci_high:.3f}]" if math.isfinite(p.ci_low) else "", p.boots,
         p.verdict, "; ".join(p.changes)]
        for p in history.points
    ]  # fmt: skip
    return _PAGE.render(
        h=history,
        selectors=" ".join(history.selectors) or "every configuration",
        alpha=0.05,
        charts=charts,
        head=head,
        rows=rows,
    )
