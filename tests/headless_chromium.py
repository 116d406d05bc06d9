"""How the report's browser test and bench/report_bench.py start Debian's Chromium.

The flags keep a headless Chromium off the network entirely: on a machine whose only
reachable hosts are package registries, its background services would otherwise retry
connections at every start.
"""

from __future__ import annotations

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
