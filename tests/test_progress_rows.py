"""The per-target progress rows that `vmtax run` draws on a terminal."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from vmtax.cli.run_cmd import RichProgress

pytestmark = pytest.mark.fast


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=120, color_system=None), out


def test_each_host_row_ends_with_how_it_ended_and_labels_stay_text():
    console, out = _console()
    with RichProgress(console) as bar:
        bar.add_target("h[red]1", 2)
        bar.add_target("h2", 2)
        bar.advance("h[red]1", "h[red]1: cpuid run 0")
        bar.advance("h2", "h2: cpuid run 0 (1 failed or lost)")
        bar.finish("h[red]1", "h[red]1: done, 2 ok", failed=False)
        bar.finish("h2", "h2: FAILED after 1 runs: ssh: connection refused", failed=True)
    text = out.getvalue()
    assert "h[red]1: done, 2 ok" in text  # a name that looks like markup is printed as it is
    assert "h2: FAILED after 1 runs: ssh: connection refused" in text
