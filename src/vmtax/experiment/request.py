"""What a user asks `vmtax run` for, checked once before anything starts.

The CLI and the notebook API build the same :class:`RunRequest`; ``validate()`` refuses bad
input with a UsageError (exit 2) before a store is opened or a guest booted.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmtax.errors import UsageError
from vmtax.hostprof import modes
from vmtax.plan import bounds
from vmtax.plan.params import parse_params
from vmtax.plan.suite import parse_percent, parse_seconds
from vmtax.plan.targets import fleet_size
from vmtax.stats.compare_options import BOOT_COST_S
from vmtax.targets.spec import FleetHostSpec, LevelSpec, LocalSpec, SshSpec, TargetSpec

_LABEL = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)=(.+)$")
_LEVEL = re.compile(r"^L[0-3]$")
_RESERVED = {
    "exp", "experiment", "config", "level", "probe", "target", "hypervisor", "status", "run",
    "set",
}  # fmt: skip
#: Boots of each guest level when --boots is not given: the fewest that give a boot-level
#: interval (two boots leave one degree of freedom between them); docs/levels.md, "Boots".
DEFAULT_BOOTS = 3
#: More boots than this is a typo: on TCG an L1 boot takes seconds, an L2 one minutes.
MAX_BOOTS = 1000
#: The label that tells apart two configurations of one level (--levels L1,L1): a, b, ...
SET_LABEL = "set"
_SETS = "abcdefghijklmnopqrstuvwxyz"


@dataclass
class RunRequest:
    """Every option of one `vmtax run` (the defaults are the CLI's)."""

    suite: str = "quick"
    probes: list[str] = field(default_factory=list)
    runs: int | None = None
    params: list[str] = field(default_factory=list)
    level: str | None = None
    labels: list[str] = field(default_factory=list)
    db: str | None = None
    timeout: float | None = None
    duration: float | None = None
    seed: int | None = None
    levels: str | None = None
    depth: int | None = None
    preset: str = "seed-c"
    accel: str = "auto"
    inner_accel: str = "tcg"
    guest_net: str = ""
    ssh: list[str] = field(default_factory=list)
    fleet: str | None = None
    #: An Ansible host pattern narrowing the inventory (--limit).
    limit: str | None = None
    accept_new_host_key: bool = False
    #: --exits: None or False (none), True or "counts", "trace", or the recorder per level
    #: ("L2=trace,L3=counts"; ``modes.parse_modes``).
    exits: bool | str | None = False
    precision: str | None = None
    budget: str | None = None
    min_runs: int | None = None
    #: Boots of each guest level (None: DEFAULT_BOOTS); this machine and SSH hosts have one.
    boots: int | None = None
    #: What one boot of a guest costs, in seconds (--boot-cost): adaptive sampling's and the
    #: run's report's runs per boot (Kalibera and Jones), as compare's --boot-cost; None
    #: (not given): BOOT_COST_S. Like --boots, it needs a guest level.
    boot_cost_s: float | None = None
    #: The command line stored with the experiment (its --db shown without a password).
    argv: list[str] = field(default_factory=list)
    #: When the request was made (monotonic): an adaptive --budget bounds the whole command.
    started: float = field(default_factory=time.monotonic)

    def validate(self) -> Checked:
        """Refuse what cannot run, in one line (UsageError), before anything starts."""
        sampling = sampling_options(self.precision, self.budget, self.min_runs, self.runs)
        bounds.check_runs(self.runs)
        check_boots(self.boots)
        bounds.check_seconds(self.boot_cost_s, "--boot-cost", bounds.MAX_TIMEOUT_S)
        bounds.check_seed(self.seed)
        bounds.check_seconds(self.timeout, "--timeout", bounds.MAX_TIMEOUT_S)
        bounds.check_seconds(self.duration, "--duration", bounds.MAX_DURATION_S)
        params = parse_params(self.params)
        if self.accel not in {"auto", "kvm", "tcg"}:
            raise UsageError(f"--accel must be auto, kvm or tcg, got {self.accel!r}")
        if self.inner_accel not in {"kvm", "tcg"}:
            raise UsageError(f"--inner-accel must be kvm or tcg, got {self.inner_accel!r}")
        if self.level is not None and not _LEVEL.match(self.level):
            raise UsageError(f"--level must be L0, L1, L2 or L3, got {self.level!r}")
        labels = parse_labels(self.labels)
        levels = self.levels
        if self.depth is not None:
            if levels is not None:
                raise UsageError("give --depth or --levels, not both")
            if not 1 <= self.depth <= 3:
                raise UsageError(f"--depth must be 1, 2 or 3, got {self.depth}")
            levels = ",".join(f"L{n}" for n in range(self.depth + 1))
        upper = (levels or "").upper()
        if self.guest_net not in {"", "user"}:
            raise UsageError(f"--guest-net must be user, got {self.guest_net!r}")
        if self.guest_net and not re.search(r"L1", upper):
            raise UsageError("--guest-net needs a guest level: --levels L0,L1")
        if self.guest_net and re.search(r"L[23]", upper):
            raise UsageError("--guest-net reaches L1 guests only; L2 and L3 have no NIC")
        if self.boots is not None and not re.search(r"L[1-3]", upper):
            raise UsageError(
                "--boots applies to guest levels (this machine and SSH hosts have one boot): "
                "add --levels L0,L1"
            )
        if self.boot_cost_s is not None and not re.search(r"L[1-3]", upper):
            raise UsageError(
                "--boot-cost applies to guest levels (this machine and SSH hosts have one "
                "boot): add --levels L0,L1"
            )
        if self.inner_accel == "kvm" and not re.search(r"L[23]", upper):
            raise UsageError("--inner-accel kvm needs a nested level: --levels L1,L2 or L1,L2,L3")
        exits = modes.parse_modes(self.exits)
        named = sorted(set(exits) - {modes.EVERY} - set(re.findall(r"L[0-3]", upper)))
        if named:
            raise UsageError(
                f"--exits {self.exits}: this run measures no {', '.join(named)} "
                f"(--levels {levels or 'none: this machine, L0'})"
            )
        for mode in sorted(set(exits.values())):
            modes.require(mode)  # a mode this machine lacks is refused before anything runs
        return Checked(sampling=sampling, params=params, labels=labels, levels=levels)

    @property
    def boot_cost(self) -> float:
        """What one boot costs, in seconds: --boot-cost, or BOOT_COST_S when not given."""
        return BOOT_COST_S if self.boot_cost_s is None else self.boot_cost_s

    def target_specs(self, levels: str | None) -> list[TargetSpec]:
        specs = target_specs(
            levels=levels,
            preset=self.preset,
            accel=self.accel,
            ssh=self.ssh,
            fleet=self.fleet,
            limit=self.limit,
            inner_accel=self.inner_accel,
            guest_net=self.guest_net,
            boots=self.boots,
        )
        if self.level is not None and len(specs) > 1:
            raise UsageError("--level names one machine; with several targets each has its own")
        return specs


@dataclass
class Checked:
    """A validated request's parsed parts."""

    sampling: dict[str, Any]
    params: dict[str, Any]
    labels: dict[str, str]
    levels: str | None


def sampling_options(
    precision: str | None, budget: str | None, min_runs: int | None, runs: int | None
) -> dict[str, Any]:
    """--precision / --budget / --min-runs as build_plan arguments; UsageError when bad."""
    if precision is not None and runs is not None:
        raise UsageError("give --runs (a fixed number) or --precision (adaptive), not both")
    if min_runs is not None and min_runs < 2:
        raise UsageError(f"--min-runs must be at least 2, got {min_runs}")
    try:
        pct = None if precision is None else parse_percent(precision)
    except ValueError as exc:
        raise UsageError(f"--precision {exc}") from None
    try:
        seconds = None if budget is None else parse_seconds(budget)
    except ValueError as exc:
        raise UsageError(f"--budget {exc}") from None
    return {"precision": pct, "budget": seconds, "min_runs": min_runs}


def check_boots(boots: int | None) -> None:
    """--boots is a whole number of boots, 1..MAX_BOOTS."""
    if boots is not None and not 1 <= boots <= MAX_BOOTS:
        shown = str(boots) if len(str(boots)) <= 20 else f"{str(boots)[:20]}..."
        raise UsageError(f"--boots must be in 1..{MAX_BOOTS}, got {shown}")


def parse_labels(items: list[str]) -> dict[str, str]:
    """``key=value`` strings to a dict; bad syntax or a reserved key is a UsageError."""
    out: dict[str, str] = {}
    for item in items:
        m = _LABEL.match(item.strip())
        if not m:
            raise UsageError(f"--label must be key=value (letters, digits, _ . -), got {item!r}")
        key, value = m.group(1).lower(), m.group(2).strip()
        if key in _RESERVED:
            raise UsageError(f"--label key {key!r} is reserved for selectors; choose another")
        if "," in value:
            raise UsageError(f"--label value may not contain a comma: {item!r}")
        out[key] = value
    return out


def target_specs(
    *,
    levels: str | None,
    preset: str,
    accel: str,
    ssh: list[str],
    fleet: str | None,
    limit: str | None = None,
    inner_accel: str = "tcg",
    guest_net: str = "",
    boots: int | None = None,
) -> list[TargetSpec]:
    """What to run on, typed until the plan is stored (its records; --resume rebuilds it).

    Each guest level gets ``boots`` boots (DEFAULT_BOOTS when None). A guest level named
    twice or more (``L1,L1``) is that many configurations of the same guest, each measured in
    boots of its own, told apart by the label ``set=a``, ``set=b``, ... (an A/A test)."""
    specs: list[TargetSpec] = []
    if levels:
        names = [x.strip().upper() for x in levels.split(",") if x.strip()]
        bad = [x for x in names if not _LEVEL.match(x)]
        if bad or not names:
            raise UsageError(f"--levels must be levels like L0,L1,L2, got {levels!r}")
        if names.count("L0") > 1:
            raise UsageError(
                "--levels names L0 twice: this machine has one boot, so a second L0 would "
                "measure the same boot again; name a guest level twice (L1,L1) for an A/A test"
            )
        repeated = {n for n in names if names.count(n) > 1}
        if any(names.count(n) > len(_SETS) for n in repeated):
            raise UsageError(f"--levels names a level more than {len(_SETS)} times")
        # L0 goes through the level provisioner too: levels on one machine then take turns,
        # so L0 is never measured while a guest is busy beside it.
        level = LevelSpec(
            level="L0", preset=preset, accel=accel, inner_accel=inner_accel, guest_net=guest_net
        )
        seen: dict[str, int] = {}
        for name in names:
            spec = level.model_copy(update={"level": name})
            if name != "L0":
                spec = spec.model_copy(update={"boots": DEFAULT_BOOTS if boots is None else boots})
            if name in repeated:
                spec = spec.model_copy(update={SET_LABEL: _SETS[seen.get(name, 0)]})
                seen[name] = seen.get(name, 0) + 1
            specs.append(spec)
    for url in ssh:
        if not url.startswith("ssh://") or len(url) <= len("ssh://"):
            raise UsageError(f"--target must look like ssh://user@host[:port], got {url!r}")
        specs.append(SshSpec(url=url))
    if fleet:
        # An inventory may also be a directory or Ansible's "host1,host2," list.
        if "," not in fleet and not Path(fleet).exists():
            raise UsageError(f"inventory not found: {fleet}")
        if levels or ssh:
            raise UsageError("an inventory is measured alone, not with --levels or --target")
        count, _ = fleet_size(fleet, limit)
        path = str(Path(fleet).resolve()) if Path(fleet).exists() else fleet
        specs += [FleetHostSpec(path=path, index=i, limit=limit) for i in range(count)]
    return specs or [LocalSpec()]
