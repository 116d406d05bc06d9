"""Guest image contents are an argument, never a side effect of an import: the image
`vmtax run` boots and the one `vmtax image build` makes are the same bytes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vmtax.experiment.request import target_specs
from vmtax.plan.targets import make_targets
from vmtax.targets.images import AGENT_ONLY
from vmtax.workloads import image_contents

pytestmark = pytest.mark.fast


def test_run_and_image_build_make_the_same_image(cli):
    specs = target_specs(levels="L1", preset="seed-c", accel="tcg", ssh=[], fleet=None)
    (target,), _ = make_targets(specs, contents=image_contents())
    booted = target.resolve_image()  # what prepare() would boot; nothing is booted here
    out = cli("image", "build", "--mode", "minimal").stdout
    assert f"image {booted.kind}-{booted.digest}:" in out
    # The servers are in it because the caller asked, not because something was imported.
    assert any(b.endswith("lighttpd") for b in booted.manifest.get("extra_binaries", []))


def test_importing_the_workloads_changes_no_image():
    code = (
        "import sys; from vmtax.targets.base import find_agent; "
        "from vmtax.targets.images import build_minimal; "
        "[__import__(m) for m in sys.argv[1:]]; "
        "print(build_minimal(find_agent()).digest)"
    )
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    after = subprocess.run(
        [sys.executable, "-c", code, "vmtax.workloads", "vmtax.runner", "vmtax.cli"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert plain.stdout.strip() and plain.stdout == after.stdout


def test_contents_merge_without_duplicates():
    both = AGENT_ONLY.plus(("/bin/a", "/bin/b"), {"etc/x": b"1"}).plus(("/bin/a",), {"etc/x": b"2"})
    assert both.binaries == ("/bin/a", "/bin/b") and dict(both.files) == {"etc/x": b"2"}
