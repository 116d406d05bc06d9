"""The `perf kvm stat report --event=vmexit` parser, on real reports captured on the testbed
(tests/fixtures/hostprof/README.md says how), checked against the kernel's own histogram of
the same window."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vmtax.errors import VmtaxError
from vmtax.hostprof.parse_perf import parse_report
from vmtax.hostprof.reasons import reason_name

pytestmark = pytest.mark.fast

FIXTURES = Path(__file__).parent / "fixtures" / "hostprof"
PROBES = ("cpuid", "timer", "io")


def hist_counts(probe: str) -> dict[int, int]:
    text = (FIXTURES / f"hist-kvm-exit-{probe}.txt").read_text()
    found = re.findall(r"\{ exit_reason:\s+(\d+) \} hitcount:\s+(\d+)", text)
    return {int(code): int(n) for code, n in found}


@pytest.mark.parametrize("probe", PROBES)
def test_perf_report_matches_the_kernel_histogram(probe):
    prof = parse_report((FIXTURES / f"perf-kvm-stat-report-{probe}.txt").read_text(), "svm")
    assert prof["complete"], prof["problems"]
    perf = {r["code"]: r["count"] for r in prof["reasons"]}
    hist = hist_counts(probe)
    assert set(perf) == set(hist)
    for code, n in hist.items():
        # perf and the histogram counted the same window; perf may miss the last exit or two.
        assert abs(perf[code] - n) <= 2, (reason_name("svm", code), perf[code], n)
    assert prof["hits"] == sum(perf.values())
    timed = sum(r["time_ns"] for r in prof["reasons"])
    assert timed == pytest.approx(prof["total_time_ns"], rel=1e-3)


def test_cpuid_report_names_and_numbers():
    prof = parse_report((FIXTURES / "perf-kvm-stat-report-cpuid.txt").read_text(), "svm")
    by = {reason_name("svm", r["code"]): r for r in prof["reasons"]}
    assert by["cpuid"]["count"] == 5290
    assert by["cpuid"]["time_ns"] == round(54.92 * 1000 * 5290)
    assert by["io"]["count"] == 65077
    assert by["UD excp"]["count"] == 1 and by["cr0_sel_write"]["count"] == 28
    assert prof["hits"] == 85487


def test_an_unknown_name_is_kept_as_a_problem_and_marks_the_profile_incomplete():
    text = (FIXTURES / "perf-kvm-stat-report-cpuid.txt").read_text()
    odd = text.replace("           write_dr0", "        mystery_exit")
    prof = parse_report(odd, "svm")
    assert not prof["complete"]
    assert prof["problems"] == ["unknown exit reason name 'mystery_exit' (1 exits)"]
    assert prof["hits"] == 85487  # the total still counts it


def test_a_cut_report_is_incomplete_and_other_text_is_an_error():
    text = (FIXTURES / "perf-kvm-stat-report-io.txt").read_text()
    cut = parse_report(text.split("Total Samples")[0], "svm")
    assert not cut["complete"] and "cut short" in cut["problems"][0]
    with pytest.raises(VmtaxError, match="not a perf kvm stat report"):
        parse_report("Error: no kvm events recorded\n", "svm")
