"""Study B's triplet in a sweep: web, app and db guests per triplet, and the closed-loop
clients that drive them from this machine.

Triplet k of a step is guests 3k (db), 3k+1 (app) and 3k+2 (web), booted in that order from
an image that carries the tiers' servers (``vmtax.workloads.webapp``). Each tier listens on
guest port ``webapp.PORT``, which QEMU forwards from a loopback port of this machine; the
next tier reaches it at 10.0.2.2 (this machine, seen from a guest) on that port. So the db
boots first, then the app, told the db's port, then the web, told the app's port, and the
web's port is where the triplet's clients connect.

A client is the agent's ``http`` probe on this machine: one keep-alive connection to the
web tier, a transaction being ``events`` GETs of the app's page (each one web -> app -> db
and back), repeated back to back or ``think_time_s`` apart.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from vmtax.plan.targets import make_targets
from vmtax.sweep.qemu import QemuGuests
from vmtax.sweep.run import Client, Guest, Transaction
from vmtax.sweep.spec import StepSize, SweepSpec
from vmtax.sweep.tiers import TIER_NAMES
from vmtax.targets.base import Target, TargetError, find_agent
from vmtax.targets.images import Image, build_minimal
from vmtax.targets.spec import LocalSpec
from vmtax.workloads import image_contents, webapp
from vmtax.workloads.reach import HOST_FROM_GUEST

#: The db tier's scratch disk (its data directory; sparse, so it costs what it holds).
DB_SCRATCH_MB = 512
#: Seconds a tier may take to start in its guest (TCG: mariadbd and loading the table).
TIER_START_TIMEOUT = 240.0


def triplet_image() -> Image:
    """The minimal image with the workloads' servers and PHP (this image only)."""
    extras = image_contents().plus(webapp.guest_binaries(), webapp.guest_files())
    return build_minimal(find_agent(), contents=extras)


class TripletGuests(QemuGuests):
    """Boots a step's guests tier by tier and starts each tier's server in its guest."""

    def __init__(self, spec: SweepSpec, *, boot_timeout: float = 300.0) -> None:
        super().__init__(spec, boot_timeout=boot_timeout, image=triplet_image())
        #: Triplet -> the loopback port of its last started tier (where the next connects).
        self.ports: dict[int, int] = {}

    def __call__(self, size: StepSize, index: int, vcpus: int, memory_mb: int) -> Guest:
        triplet, position = divmod(index, len(TIER_NAMES))
        tier = TIER_NAMES[position]
        sizes = self.spec.triplet
        server_id = secrets.randbelow(2**31) + 1
        mine: dict[str, Any] = {"tier": tier, "triplet": triplet + 1}
        if tier == "db":
            mine["db_server_id"] = server_id
        guest = self.boot(size, index, vcpus, memory_mb, network="user",
                          scratch_mb=DB_SCRATCH_MB if tier == "db" else 0,
                          provenance=mine)  # fmt: skip
        target = guest.target
        try:
            forwards = target.capabilities().forwards  # a user network's, chosen at boot
            if forwards is None:
                raise TargetError(f"{target.name} has no forwarded ports for the {tier} tier")
            port = forwards()[webapp.PORT]
            command = webapp.tier_command(
                tier,
                backend=(HOST_FROM_GUEST, self.ports.get(triplet, 0)),
                server_id=server_id,
                rows=sizes.rows,
                buffer_mb=sizes.buffer_mb,
                children=sizes.php_children,
            )
            ready = start_tier(target, tier, command)
        except BaseException:
            target.close()
            raise
        self.ports[triplet] = port
        guest.steal_script = webapp.STEAL
        guest.detail = {"tier_ready_s": ready, "port": port}
        return guest

    def clients(self, guests: list[Guest], end: float, out: list[Transaction]) -> list[Client]:
        """The closed-loop clients of every triplet, each on this machine."""
        found: list[Client] = []
        for web in range(len(TIER_NAMES) - 1, len(guests), len(TIER_NAMES)):
            port = int(guests[web].detail["port"])
            for n in range(self.spec.clients):
                found.append(WebClient(web, guests[web], self.spec, end, out, port, n))
        return found


def start_tier(target: Target, tier: str, command: str) -> float:
    """Run ``command`` (a tier's start script) in the guest through the agent's ``exec``;
    seconds it took in the guest from start to serving (its ``ready`` uptimes)."""
    args = ["run", "exec", "--runs", "1", "--iterations", "2", "--warmup", "0"]
    args += ["--timeout", f"{TIER_START_TIMEOUT:g}"]
    args += ["--param", f"cmd={command}", "--param", "values_prefix=ready"]
    values: list[float] = []
    error = ""
    for line in target.run_agent(args, TIER_START_TIMEOUT + 30):
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        if rec.get("type") == "samples":
            values = [float(v) for v in rec["values"]]
        elif rec.get("type") == "end" and rec.get("status") != "ok":
            error = str(rec.get("error") or "")
    if error or len(values) < 2:
        why = error or (target.last_stderr.strip().splitlines() or ["no ready line"])[-1]
        raise TargetError(f"the {tier} tier did not start: {' '.join(why.split())}")
    return round(values[-1] - values[0], 2)


class WebClient(Client):
    """A closed-loop client on this machine: the agent's http probe GETting the app's page
    through one triplet's web tier (``port`` on this machine's loopback)."""

    steal_from_agent = False  # the agent runs here: its steal is this machine's

    def __init__(
        self,
        index: int,
        guest: Guest,
        spec: SweepSpec,
        end: float,
        out: list[Transaction],
        port: int,
        number: int,
    ) -> None:
        super().__init__(index, guest, spec, end, out)
        self.port = port
        triplet = index // len(TIER_NAMES) + 1
        self.label = f"triplet {triplet} client {number + 1}"
        (self.local,), _ = make_targets([LocalSpec(name=f"triplet{triplet}-client{number + 1}")])

    def invocation(self, seconds: float) -> tuple[Target, list[str], float]:
        runs = 1 if self.spec.think_time_s > 0 else 1_000_000  # the agent's maximum
        args = ["run", "http", "--runs", str(runs), "--iterations", str(self.spec.events)]
        args += ["--warmup", "0", "--duration", "86400", "--timeout", f"{max(0.5, seconds):.2f}"]
        params = {"host": "127.0.0.1", "port": self.port, "path": webapp.PAGE, "connections": 1}
        for key, value in params.items():
            args += ["--param", f"{key}={value}"]
        return self.local, args, 1.0
