"""The HTML report in real headless Chromium (Debian's /usr/bin/chromium via Playwright):
no console error, no network request, every figure a drawn SVG, hostile text shown as text.
A screenshot is saved under test-artifacts/ in the repository root."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from playwright import sync_api

from headless_chromium import ARGS, CHROMIUM
from vmtax.report import analysis, gather, write_model
from vmtax.stats.compare_options import CompareOptions
from vmtax.store import Store
from vmtax.testing.report_store import populate

pytestmark = pytest.mark.slow

LABEL = "<script>alert(1)</script>"
HOST = 'evil" onload="alert(1)'
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"

if shutil.which(CHROMIUM) is None:  # scripts/test installs it; say so plainly if it is missing
    pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium", pytrace=False)


@pytest.fixture(scope="module")
def page_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    store = Store.open(f"sqlite:///{tmp / 'b.db'}")
    populate(store, runs=6, iterations=600, labels={"note": LABEL}, hostname=HOST)
    model = analysis.build(
        gather.load(store, ["exp=latest"], None), options=CompareOptions(resamples=1_000)
    )
    store.close()
    path = write_model(model, tmp / "report.html").path
    events = {"console": [], "requests": [], "dialogs": [], "errors": []}
    with sync_api.sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=ARGS,
            viewport={"width": 1100, "height": 900},
        )
        page = ctx.new_page()
        page.on("console", lambda m: events["console"].append((m.type, m.text)))
        page.on("request", lambda r: events["requests"].append(r.url))
        page.on("pageerror", lambda e: events["errors"].append(str(e)))

        def on_dialog(dialog):
            events["dialogs"].append(dialog.message)
            dialog.dismiss()

        page.on("dialog", on_dialog)
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_timeout(300)  # let anything that would run, run
        figs = page.evaluate("""() => [...document.querySelectorAll('figure.fig')].map(f => {
            const svg = f.querySelector('svg');
            if (!svg) return {id: f.id, svg: false};
            const box = svg.getBoundingClientRect();
            return {id: f.id, svg: true, children: svg.childElementCount,
                    drawn: svg.querySelectorAll('path, text, image, use').length,
                    width: box.width, height: box.height};
        })""")
        dom = page.evaluate("""() => ({
            scripts: document.querySelectorAll('script').length,
            onload: document.querySelectorAll('[onload]').length,
            bodyText: document.body.innerText,
            svgText: [...document.querySelectorAll('svg text')].map(t => t.textContent),
        })""")
        label_visible = page.get_by_text(LABEL).first.is_visible()
        host_visible = page.get_by_text(HOST).first.is_visible()
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        ctx.close()
    return {
        "url": path.as_uri(),
        "model": model,
        "events": events,
        "figs": figs,
        "dom": dom,
        "label_visible": label_visible,
        "host_visible": host_visible,
        "shot": shot,
    }


def test_page_loads_without_console_errors(page_report):
    events = page_report["events"]
    assert not events["errors"], events["errors"]
    assert not [m for m in events["console"] if m[0] in ("error", "warning")], events["console"]


def test_no_network_request_but_the_page_itself(page_report):
    assert page_report["events"]["requests"] == [page_report["url"]]


def test_every_figure_is_a_drawn_svg(page_report):
    figs = page_report["figs"]
    assert len(figs) == len(page_report["model"].figures)
    for fig in figs:
        assert fig["svg"], fig
        assert fig["children"] > 0 and fig["drawn"] > 10, fig
        assert fig["width"] > 300 and fig["height"] > 100, fig


def test_hostile_label_and_hostname_are_text(page_report):
    dom = page_report["dom"]
    assert page_report["events"]["dialogs"] == []
    assert dom["scripts"] == 0 and dom["onload"] == 0
    assert LABEL in dom["bodyText"] and HOST in dom["bodyText"]
    assert page_report["label_visible"] and page_report["host_visible"]
    assert any(LABEL in t for t in dom["svgText"])  # figure labels too, as SVG text


def test_screenshot_saved(page_report):
    assert page_report["shot"].read_bytes().startswith(b"\x89PNG")
