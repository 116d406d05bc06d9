"""The sizes of study B's triplet (web, app and db guests) and how many closed-loop clients
drive each triplet: study B's own (``study-b``) and a scaled-down set (``small``, the default)
that fits several triplets of TCG guests on a small machine.

Study B ran each triplet as web 1 vCPU / 750 MB, app 2 vCPUs / 2048 MB and db 1 vCPU /
1800 MB, driven by 4 closed-loop clients with no think time. The small set keeps one vCPU per
tier and the least memory the guest image boots and serves in: the image (lighttpd, PHP,
MariaDB, sysbench and the other workloads' servers) is about 120 MB, which the guest kernel
unpacks into a RAM file system of at most half its memory, so below about 448 MiB it does not
fit (measured: 384 MiB fails to unpack, 448 MiB boots); the db tier gets 512 MiB for mariadbd
and its buffer pool.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The tiers in the order they boot (each is told where the previous one listens), which is
#: also their order among a step's guests: triplet k is guests 3k, 3k+1 and 3k+2.
TIER_NAMES = ("db", "app", "web")


@dataclass(frozen=True)
class TripletSizes:
    #: (vCPUs, MiB) of each tier, by name.
    db: tuple[int, int]
    app: tuple[int, int]
    web: tuple[int, int]
    #: Closed-loop clients per triplet (each its own keep-alive connection to the web tier).
    clients: int
    #: Rows of the db tier's table, its InnoDB buffer pool, and the app tier's PHP processes.
    rows: int
    buffer_mb: int
    php_children: int

    def tier(self, name: str) -> tuple[int, int]:
        return {"db": self.db, "app": self.app, "web": self.web}[name]

    @property
    def vcpus(self) -> int:
        """vCPUs of one triplet."""
        return sum(self.tier(n)[0] for n in TIER_NAMES)


TRIPLET_SIZES = {
    "small": TripletSizes(
        db=(1, 512), app=(1, 448), web=(1, 448), clients=2, rows=10_000, buffer_mb=32,
        php_children=2,
    ),
    "study-b": TripletSizes(
        db=(1, 1800), app=(2, 2048), web=(1, 750), clients=4, rows=100_000, buffer_mb=512,
        php_children=4,
    ),
}  # fmt: skip
#: Page views per transaction when the sweep is not told (--events): a short visit.
TRIPLET_EVENTS = 10
#: Triplets per step of the default triplet sweep: four steps, the fewest the knee needs.
DEFAULT_TRIPLETS = (1, 2, 3, 4)
