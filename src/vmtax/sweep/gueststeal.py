"""Each guest's own steal time during a step, for guests whose clients run elsewhere (the
triplet's clients run on this machine, so no agent run in the guest reports its steal).

One agent request per guest for the whole step: the ``exec`` probe runs a script from the
guest image that reads /proc/stat at the sweep's interval (uptime, steal ticks, all ticks)
and prints every reading at the end, so no agent is started in the guest at each sample. The
readings are placed on this machine's clock by the guest's uptime, counted back from when
they arrived, and a sample interval's steal is the stolen share of the guest's CPU ticks
between its two ends (interpolated between readings).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time

import numpy as np

from vmtax.targets.base import Target


class StealRecorder(threading.Thread):
    """Reads one guest's /proc/stat ``count`` times, ``interval_s`` apart, with ``script``."""

    def __init__(self, target: Target, script: str, interval_s: float, count: int) -> None:
        super().__init__(name=f"sweep-steal-{getattr(target, 'name', '?')}", daemon=True)
        self.target, self.script = target, script
        self.interval_s, self.count = interval_s, count
        #: (this machine's monotonic time, steal ticks, all ticks), oldest first.
        self.readings: list[tuple[float, float, float]] = []
        self.error: str | None = None

    def run(self) -> None:
        args = ["run", "exec", "--runs", "1", "--iterations", "2", "--warmup", "0"]
        args += ["--param", f"cmd=/bin/sh {self.script} {self.interval_s:g} {self.count}"]
        args += ["--param", "values_prefix=stat"]
        timeout = self.interval_s * self.count + 60
        try:
            for line in self.target.run_agent(args, timeout):
                if line.startswith('{"type":"samples"'):
                    self._place(json.loads(line)["values"], time.monotonic())
        except Exception as exc:  # noqa: BLE001 - a thread's error is kept, in one line
            # (its guest going away, on Ctrl-C too, is no traceback)
            self.error = " ".join(str(exc).split())

    def _place(self, values: list[float], arrived: float) -> None:
        triples = [values[i : i + 3] for i in range(0, len(values) - 2, 3)]
        if not triples:
            return
        last_uptime = triples[-1][0]
        self.readings = [(arrived - (last_uptime - up), st, tot) for up, st, tot in triples]

    def steal(self, a: float, b: float) -> float | None:
        """The stolen share of the guest's CPU time between this machine's times a and b, or
        None when the readings do not cover them (within half an interval)."""
        if len(self.readings) < 2:
            return None
        t, st, tot = (np.asarray(col) for col in zip(*self.readings, strict=True))
        slack = self.interval_s / 2
        if a < t[0] - slack or b > t[-1] + slack or b <= a:
            return None
        ticks = float(np.interp(b, t, tot) - np.interp(a, t, tot))
        return float(np.interp(b, t, st) - np.interp(a, t, st)) / ticks if ticks > 0 else None

    def finish(self, timeout: float) -> None:
        with contextlib.suppress(RuntimeError):
            self.join(timeout)
