"""Read the table ``perf kvm stat report --event=vmexit`` prints.

perf has no machine-readable output for this report (no JSON or CSV option), so its text is
parsed here: one row per exit reason with samples, their shares, min/max/mean handling time,
then ``Total Samples:N, Total events handled time:Tus.``. Names are the kernel's
(``SVM_EXIT_REASONS`` / ``VMX_EXIT_REASONS``), as in ``vmtax.hostprof.reasons``. The result
has the shape ``vmtax-probe exits stop`` prints, so ``store.save_profile`` takes either.
"""

from __future__ import annotations

import re
from typing import Any

from vmtax.errors import VmtaxError
from vmtax.hostprof.reasons import reason_code

_ROW = re.compile(
    r"^\s*(?P<name>\S.*?)\s+(?P<samples>\d+)\s+(?P<spct>[\d.]+)%\s+(?P<tpct>[\d.]+)%\s+"
    r"(?P<min>[\d.]+)us\s+(?P<max>[\d.]+)us\s+(?P<avg>[\d.]+)us\s+\(\s*\+-\s*[\d.]+%\s*\)\s*$"
)
_TOTAL = re.compile(r"Total Samples:\s*(\d+),\s*Total events handled time:\s*([\d.]+)us")


def parse_report(text: str, isa: str) -> dict[str, Any]:
    """The profile of one ``perf kvm stat report --event=vmexit`` output (``isa``: svm or vmx,
    which perf does not print). Handling time per reason is samples × the mean perf prints
    (rounded to 10 ns per exit). A name the reason tables do not know is kept in
    ``problems`` and marks the profile incomplete; a text without the table is an error."""
    if "VM-EXIT" not in text:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "(empty)")
        raise VmtaxError(f"not a perf kvm stat report --event=vmexit output: {first[:120]}")
    reasons: list[dict[str, Any]] = []
    problems: list[str] = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        name, count = m["name"].strip(), int(m["samples"])
        code = reason_code(isa, name)
        if code is None:
            problems.append(f"unknown exit reason name {name!r} ({count} exits)")
            continue
        time_ns = round(float(m["avg"]) * 1000 * count)
        reasons.append({"code": code, "count": count, "time_ns": time_ns, "timed": count})
    total = _TOTAL.search(text)
    hits = int(total.group(1)) if total else sum(r["count"] for r in reasons)
    if total is None:
        problems.append("no Total Samples line: the report may be cut short")
    return {
        "type": "exits",
        "isa": isa,
        "reasons": sorted(reasons, key=lambda r: r["code"]),
        "hits": hits,
        "timed": sum(r["timed"] for r in reasons),
        "dropped": 0,
        "complete": not problems,
        "problems": problems,
        "total_time_ns": round(float(total.group(2)) * 1000) if total else None,
    }
