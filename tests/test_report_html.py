"""The report from a real SQLite store through the real statistics: sections, escaping,
self-containment, markdown with PNGs, the CLI, and the size bound."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from vmtax.report import analysis, gather, write_model
from vmtax.stats.compare_options import CompareOptions
from vmtax.store import Store
from vmtax.testing.report_store import populate

LABEL = "<script>alert(1)</script>"
HOST = 'evil" onload="alert(1)'
NAMESPACES = {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
SIZE_LIMIT = 5_000_000


def build_store(url: str, **kwargs) -> Store:
    store = Store.open(url)
    populate(store, **kwargs)
    return store


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One report of 3 levels x 2 probes with a hostile label and hostname."""
    tmp = tmp_path_factory.mktemp("report")
    url = f"sqlite:///{tmp / 'r.db'}"
    store = build_store(url, runs=6, iterations=600, labels={"note": LABEL}, hostname=HOST)
    data = gather.load(store, ["exp=latest"], None, ["vmtax", "report", "exp=latest"])
    model = analysis.build(data, options=CompareOptions(resamples=1_000))
    html = write_model(model, tmp / "report.html")
    md = write_model(model, tmp / "report.md", fmt="markdown")
    store.close()
    return {
        "url": url,
        "model": model,
        "html": html,
        "md": md,
        "dir": tmp,
        "text": html.path.read_text(),
    }


@pytest.mark.slow
def test_sections_in_order(report):
    text = report["text"]
    positions = [
        text.index(f'<section id="{s}">')
        for s in ("summary", "study-a", "figures", "artifacts", "environment")
    ]
    assert positions == sorted(positions)
    assert text.count('<figure class="fig') == len(report["model"].figures)


@pytest.mark.slow
def test_every_figure_kind_is_present(report):
    sections = {f.section for f in report["model"].figures}
    assert sections >= {"levels", "overhead", "distribution", "mesh", "exits", "scaling"}
    assert {f.key for f in report["model"].figures if f.reference} == {"ref-exits", "ref-scaling"}


@pytest.mark.slow
def test_summary_states_overhead_ci_and_verdict_per_level(report):
    summary = report["model"].summary
    assert len(summary) == 2  # L1 and L2 against the L0 baseline
    for line in summary:
        assert re.search(
            r": [\d.]+× the baseline's cost \(geometric mean over 2 probes, "
            r"95% CI [\d.]+–[\d.]+×\): slower than the baseline\.",
            line,
        ), line


@pytest.mark.slow
def test_study_a_tables_and_artifacts_come_from_the_statistics(report):
    model = report["model"]
    assert [t.title for t in model.studya_tables] == ["cpuid", "syscall"]
    assert all(len(t.rows) == 3 for t in model.studya_tables)
    # populate() slows every 97th iteration: the detector must find it at every level
    periodic = [a for a in model.artifacts if any("Periodic spikes every 97" in s for s in a.found)]
    assert len(periodic) == 6


@pytest.mark.slow
def test_report_is_self_contained(report):
    text = report["text"]
    assert "<script" not in text.lower()
    assert "<link" not in text.lower() and "@import" not in text
    assert not re.search(r"""\ssrc\s*=\s*["'](?!data:)""", text)
    urls = set(re.findall(r"https?://[^\"'\s)<>]+", text))
    assert urls <= NAMESPACES, urls - NAMESPACES
    assert "Content-Security-Policy" in text


@pytest.mark.slow
def test_user_text_is_escaped(report):
    text = report["text"]
    assert LABEL not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert HOST not in text
    assert "evil&#34; onload=&#34;alert(1)" in text
    assert not re.search(r"<[^>]*\sonload=", text)


@pytest.mark.slow
def test_markdown_has_the_same_sections_and_png_figures(report):
    md = report["md"]
    text = md.path.read_text()
    for heading in (
        "## 1. Summary",
        "## 2. Study-A tables",
        "## 3. Figures",
        "## 4. Timing artifacts",
        "## 5. Environment and provenance",
    ):
        assert heading in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) == len(report["model"].figures)
    for link in links:
        png = md.path.parent / link
        assert png.read_bytes().startswith(b"\x89PNG")
    assert LABEL not in text and r"\<script\>alert(1)\</script\>" in text


@pytest.mark.slow
def test_size_stays_bounded_as_samples_grow(tmp_path):
    # Same layout, 10x the iterations: histograms and meshes are fixed-size, so the file
    # must not grow with the samples (the 10^6-sample case is the slow test below).
    sizes = []
    for i, iterations in enumerate((300, 3_000)):
        store = build_store(
            f"sqlite:///{tmp_path / f'{i}.db'}", runs=3, iterations=iterations, probes=("cpuid",)
        )
        model = analysis.build(
            gather.load(store, ["exp=latest"], None), options=CompareOptions(resamples=500)
        )
        sizes.append(write_model(model, tmp_path / f"{i}.html").size)
        store.close()
    assert sizes[1] < 1.5 * sizes[0], sizes
    assert sizes[1] < SIZE_LIMIT


@pytest.mark.slow
def test_million_sample_report_is_under_5_mb(tmp_path):
    store = build_store(f"sqlite:///{tmp_path / 'big.db'}", runs=10, iterations=16_667)
    data = gather.load(store, ["exp=latest"], None)
    assert sum(v.size for v in data.samples.values()) >= 1_000_000
    written = write_model(analysis.build(data), tmp_path / "big.html")
    print(f"10^6-sample report: {written.size / 1e6:.2f} MB")
    assert written.size < SIZE_LIMIT


@pytest.fixture(scope="module")
def small_url(tmp_path_factory):
    """A small store for the CLI tests: each CLI call pays for its own statistics."""
    url = f"sqlite:///{tmp_path_factory.mktemp('cli') / 'small.db'}"
    build_store(url, runs=5, iterations=200, probes=("cpuid",)).close()
    return url


def _vmtax(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from vmtax.entry import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_cli_writes_html_and_markdown(small_url, tmp_path):
    out = tmp_path / "cli.html"
    res = _vmtax("report", "exp=latest", "--db", small_url, "-o", str(out), "--resamples", "500")
    assert res.returncode == 0, res.stderr
    assert "wrote" in res.stdout and out.stat().st_size > 10_000
    assert "vmtax report exp=latest" in out.read_text()  # the command line is in provenance
    md = tmp_path / "cli.md"
    res = _vmtax(
        "report",
        "--db",
        small_url,
        "-o",
        str(md),
        "--format",
        "markdown",
        "--baseline",
        "level=L1",
        "--resamples",
        "500",
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "cli_figures").is_dir()
    assert "Baseline: `level=L1`" in md.read_text()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "pdf"], "unknown format 'pdf'"),
        (["probe=nosuch"], "no completed runs match"),
        (["--baseline", "level=L9"], "matches no completed run"),
    ],
)
def test_cli_errors_are_one_line(small_url, tmp_path, args, message):
    res = _vmtax("report", "--db", small_url, "-o", str(tmp_path / "x.html"), *args)
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vmtax: error: "), res.stderr
    assert message in lines[0]
    assert not (tmp_path / "x.html").exists()


@pytest.mark.slow
def test_two_experiments_side_by_side(tmp_path):
    store = build_store(
        f"sqlite:///{tmp_path / 'two.db'}", runs=5, iterations=150, probes=("cpuid",), seed=1
    )
    populate(store, runs=5, iterations=150, probes=("cpuid",), seed=2)
    data = gather.load(store, ["exp=1", "exp=2"], "exp=1,level=L0")
    model = analysis.build(data, options=CompareOptions(resamples=500))
    store.close()
    assert len(model.summary) == 5  # every configuration but the baseline
    assert any(line.startswith("#2 L0 vcpus=2: ") for line in model.summary)
    env_columns = model.environment.columns[1:-1]
    assert len(env_columns) == 6 and "#1 L0 vcpus=2" in env_columns
    assert len(model.experiments) == 2
