"""Typed target specs: where a plan runs, from parsing until the plan is stored.

A spec is a frozen pydantic model, one class per kind of target: this machine, a guest
level vmtax boots, an SSH host, and a host of a fleet file. ``parse_spec`` reads the JSON a
stored plan holds (and --resume reads back); ``to_record`` writes exactly that JSON again,
so the store keeps its shape and a plan stored before these classes existed still loads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from vmtax.errors import VmtaxError


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: How many boots the target is measured in (only a guest level has more than one).
    @property
    def boot_count(self) -> int:
        return 1

    #: Whether the target runs on this machine (L0 or a guest vmtax boots here).
    @property
    def on_this_machine(self) -> bool:
        return False

    def to_record(self) -> dict[str, Any]:
        """The plan's JSON for this target: the kind, then every field not at its default."""
        kind = self.model_dump(include={"kind"})["kind"]  # every subclass's literal
        return {"kind": kind, **self.model_dump(exclude_defaults=True)}


class LocalSpec(_Spec):
    """This machine, as it is (no level vmtax provisions)."""

    kind: Literal["local"] = "local"
    level: str = "L0"
    #: The target's name where several run here at once (a sweep's clients); None: "local".
    name: str | None = None

    @property
    def on_this_machine(self) -> bool:
        return True

    def to_record(self) -> dict[str, Any]:
        named = {"name": self.name} if self.name else {}
        return {"kind": self.kind, "level": self.level, **named}


class LevelSpec(_Spec):
    """A level vmtax provisions on this machine: L0 itself, or a guest at L1..L3."""

    kind: Literal["level"] = "level"
    level: str
    preset: str
    accel: str
    inner_accel: str = "tcg"
    guest_net: str = ""
    #: Boots of the guest (None at L0, which has the one boot of this machine).
    boots: int | None = None
    #: The configuration's label when a level is named twice (``L1,L1``: sets a, b).
    set: str | None = None

    @property
    def boot_count(self) -> int:
        return self.boots or 1

    @property
    def on_this_machine(self) -> bool:
        return True

    @property
    def is_guest(self) -> bool:
        return self.level != "L0"

    def same_options(self, other: TargetSpec) -> bool:
        """Whether ``other`` is a level provisioned by the same call (same guest options)."""
        return isinstance(other, LevelSpec) and (
            (other.preset, other.accel, other.inner_accel, other.guest_net)
            == (self.preset, self.accel, self.inner_accel, self.guest_net)
        )

    def to_record(self) -> dict[str, Any]:
        rec = {"kind": self.kind, "level": self.level, "preset": self.preset, "accel": self.accel}
        return rec | self.model_dump(exclude_defaults=True, exclude={"level", "preset", "accel"})


class SshSpec(_Spec):
    """A host reached over SSH: its URL (``ssh://user@host:port``) and, where given, the
    identity key and known_hosts file to use instead of the defaults."""

    kind: Literal["ssh"] = "ssh"
    url: str
    key: str | None = None
    known_hosts: str | None = None

    @property
    def user(self) -> str | None:
        return self._parts()[0]

    @property
    def host(self) -> str:
        return self._parts()[1]

    @property
    def port(self) -> int:
        return self._parts()[2]

    def _parts(self) -> tuple[str | None, str, int]:
        # ssh.parse_url is the one parser of these URLs (and the SSH module is optional).
        from vmtax.targets.ssh import parse_url

        return parse_url(self.url)


class FleetHostSpec(_Spec):
    """Host number ``index`` of a fleet file (an inventory of SSH hosts)."""

    kind: Literal["fleet"] = "fleet"
    path: str
    index: int
    #: The Ansible host pattern (--limit) the inventory was narrowed by.
    limit: str | None = None

    def to_record(self) -> dict[str, Any]:
        limit = {"limit": self.limit} if self.limit else {}
        return {"kind": self.kind, "path": self.path, "index": self.index, **limit}


class SizedGuestSpec(_Spec):
    """An L1 guest vmtax boots at the size it is given, not a level's preset: a sweep sizes
    each guest of a step (its vCPUs and memory are the step's axis)."""

    kind: Literal["guest"] = "guest"
    name: str
    vcpus: int
    memory_mb: int
    accel: str
    #: "user": a NIC on QEMU's user network (a triplet's tiers); "": none.
    network: str = ""
    #: A scratch disk at /tmp inside, in MiB (a db tier's data); 0 for none.
    scratch_mb: int = 0
    #: Guest RAM as this shared file, so that reclaim under a memory cap can page it out
    #: (anonymous guest RAM cannot be paged on a machine without swap); None: anonymous.
    ram_file: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    #: What the guest's provenance says besides its target's own (a tier's name).
    provenance: dict[str, Any] = Field(default_factory=dict)

    @property
    def on_this_machine(self) -> bool:
        return True


_SPECS = LocalSpec | LevelSpec | SshSpec | FleetHostSpec | SizedGuestSpec
TargetSpec = Annotated[_SPECS, Field(discriminator="kind")]
_ADAPTER: TypeAdapter[_SPECS] = TypeAdapter(TargetSpec)


def parse_spec(data: TargetSpec | dict[str, Any]) -> TargetSpec:
    """A spec from a stored plan's JSON (a spec given is returned as it is)."""
    if isinstance(data, _SPECS):
        return data
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "kind"
        raise VmtaxError(f"bad target in plan ({where}): {first['msg']}") from None
