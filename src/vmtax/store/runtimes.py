"""When a run started and ended, as the controller saw it.

Two clocks each: the monotonic clock in ns orders runs exactly within one controller process
(wall time can step), and UTC wall time places them in the world and across processes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass
class RunTimes:
    started_ns: int = field(default_factory=time.monotonic_ns)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    ended_ns: int | None = None
    ended_at: datetime | None = None

    def end(self) -> RunTimes:
        """Mark the end now (once) and return self."""
        if self.ended_ns is None:
            self.ended_ns = time.monotonic_ns()
            self.ended_at = datetime.now(UTC)
        return self

    def columns(self) -> dict[str, Any]:
        return {
            "started_ns": self.started_ns,
            "ended_ns": self.ended_ns,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }
