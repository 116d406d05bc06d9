"""The static workload (busybox httpd, a new connection per GET) runs at L0, declared in one
file: its recipe, its server, its parameters."""

from __future__ import annotations

import json
import socket
import tempfile
from pathlib import Path

import pytest

from vmtax import doctor
from vmtax.targets.local import LocalTarget
from vmtax.workloads import REGISTRY, image_contents, package_capabilities, run_lines
from vmtax.workloads.recipe import Needs, Recipe
from vmtax.workloads.static import SERVER, Static, page

pytestmark = pytest.mark.fast


def _run(*extra: str) -> list[dict]:
    args = ["run", "static", "--runs", "1", "--iterations", "300", "--duration", "1"]
    args += ["--warmup", "2", "--timeout", "30", *extra]
    return [json.loads(x) for x in run_lines(LocalTarget(), args, 60.0)]


def _left() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("vmtax-wl-busybox-httpd-*")}


@pytest.mark.parametrize("file", ["index.html", "file4k.html"])
def test_static_gets_every_page_from_a_server_it_placed_and_stopped(file):
    before = _left()
    recs = _run("--param", f"file={file}")
    header, *_, summary, end = recs
    assert end["status"] == "ok", end
    assert header["probe"] == "static" and header["params"]["agent_probe"] == "http"
    assert header["params"]["file"] == file and header["params"]["path"] == f"/{file}"
    values = [
        v for r in recs if r["type"] == "samples" and not r.get("warmup") for v in r["values"]
    ]
    # Every GET timed: a connect, a fork and a response each, so each takes some time.
    assert len(values) == summary["n"] >= 2 and min(values) > 0
    assert summary["throughput_unit"] == "req/s" and summary["throughput"] > 0
    port = header["params"]["port"]
    assert _left() == before  # its directory is gone
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), 1):
        pass  # and nothing listens on its port any more


def test_a_page_that_does_not_exist_is_an_error_not_a_run():
    # The agent reads busybox's 404 as a failed request: the run ends in one error line.
    recs = _run("--param", "file=missing.html")
    assert recs[-1]["status"] == "error" and "missing.html" in recs[-1]["error"]


def test_its_recipe_is_the_one_place_its_needs_are_declared():
    w = REGISTRY["static"]
    assert w.recipe.needs.server and not w.agent_only
    cap = next(c for c in package_capabilities() if c.name == "static")
    assert cap.apt == ("busybox-static",) and cap.needs == ("bin:busybox",)
    assert doctor.check_capability(cap).ok  # installed here, as the test needs
    # Guest images carry its pages where the guest's agent starts httpd from.
    carried = dict(image_contents().files)
    assert carried["srv/vmtax-static/www/index.html"] == page(44)
    assert SERVER.guest_files().keys() <= carried.keys()
    assert len(page(44)) == 44 and len(page(4096)) == 4096


def test_a_recipe_that_needs_root_says_so_in_the_contract():
    class Rooted(Static):
        recipe = Recipe(needs=Needs(server=True, root=True))

    assert Rooted().info().needs_root and not Static().info().needs_root
