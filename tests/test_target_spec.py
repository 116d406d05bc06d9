"""Target specs are typed from parsing until stored, and stored as the same JSON as before."""

from __future__ import annotations

import pytest

from vmtax.errors import VmtaxError
from vmtax.plan.plan import Plan, boots_of
from vmtax.targets.spec import FleetHostSpec, LevelSpec, LocalSpec, SshSpec, parse_spec

pytestmark = pytest.mark.fast

RECORDS = [
    {"kind": "local", "level": "L0"},
    {"kind": "level", "level": "L0", "preset": "seed-c", "accel": "tcg"},
    {"kind": "level", "level": "L1", "preset": "seed-c", "accel": "tcg", "boots": 3},
    {
        "kind": "level", "level": "L2", "preset": "p", "accel": "tcg", "inner_accel": "kvm",
        "guest_net": "user", "boots": 2, "set": "b",
    },
    {"kind": "ssh", "url": "ssh://bench@host.example:2222"},
    {"kind": "fleet", "path": "fleet.toml", "index": 1},
]  # fmt: skip


@pytest.mark.parametrize("record", RECORDS)
def test_a_stored_record_parses_and_is_written_back_unchanged(record):
    assert parse_spec(record).to_record() == record


def test_each_kind_is_its_own_class_with_its_own_fields():
    local, l0, l1, l2, ssh, fleet = (parse_spec(r) for r in RECORDS)
    assert isinstance(local, LocalSpec) and isinstance(fleet, FleetHostSpec)
    assert isinstance(l1, LevelSpec) and l1.is_guest and not l0.is_guest
    assert [boots_of(s) for s in (local, l0, l1, l2, ssh, fleet)] == [1, 1, 3, 2, 1, 1]
    assert l0.same_options(l1) and not l1.same_options(l2) and not l0.same_options(local)
    assert isinstance(ssh, SshSpec)
    assert (ssh.user, ssh.host, ssh.port) == ("bench", "host.example", 2222)
    assert [s.on_this_machine for s in (local, l0, ssh, fleet)] == [True, True, False, False]


def test_a_plan_keeps_them_typed_and_stores_their_records():
    plan = Plan(suite="s", source="", seed=1, entries={}, steps=[], targets=RECORDS)
    assert [type(t).__name__ for t in plan.targets] == [
        "LocalSpec", "LevelSpec", "LevelSpec", "LevelSpec", "SshSpec", "FleetHostSpec",
    ]  # fmt: skip
    assert plan.to_dict()["targets"] == RECORDS
    assert Plan.from_dict(plan.to_dict()).targets == plan.targets


@pytest.mark.parametrize(
    ("record", "where"),
    [
        ({"kind": "vm", "level": "L1"}, "kind"),
        ({"kind": "level", "level": "L1", "accel": "tcg"}, "preset"),
        ({"kind": "ssh", "url": "ssh://h", "password": "x"}, "password"),
    ],
)
def test_a_bad_record_is_one_line_naming_the_field(record, where):
    with pytest.raises(VmtaxError, match=rf"bad target in plan \(.*{where}.*\)"):
        parse_spec(record)


def test_specs_are_frozen():
    with pytest.raises(ValueError, match="frozen"):
        LocalSpec().level = "L1"  # type: ignore[misc]


def test_a_sweeps_guests_are_made_by_the_plans_factory_from_their_typed_specs(tmp_path):
    """A sized guest (a sweep's) and a named local target come from `make_targets`, like a
    run's: the QEMU guest has the size, RAM file, network and labels its spec gives."""
    from vmtax.plan.targets import make_targets
    from vmtax.targets.images import Image
    from vmtax.targets.spec import SizedGuestSpec

    ram = str(tmp_path / "guest1.ram")
    guest = SizedGuestSpec(name="qemu-guest1", vcpus=3, memory_mb=192, accel="tcg",
                           network="user", scratch_mb=64, ram_file=ram,
                           labels={"sweep_step": "2"}, provenance={"tier": "db"})  # fmt: skip
    assert parse_spec(guest.to_record()) == guest and guest.on_this_machine
    image = Image("minimal", "0" * 16, tmp_path, {})
    (made, here), limit = make_targets([guest, LocalSpec(name="local-2")], image=image,
                                       boot_timeout=42.0)  # fmt: skip
    assert limit is None and (here.name, here.level) == ("local-2", "L0")
    assert (made.name, made.level, made.boot_timeout, made.image) == (
        "qemu-guest1", "L1", 42.0, image,
    )  # fmt: skip
    spec = made.spec
    assert (spec.vcpus, spec.memory_mb, spec.accel, spec.pin) == (3, 192, "tcg", False)
    assert (spec.network, spec.scratch_mb) == ("user", 64)
    assert f"memory-backend-file,id=vmtax-ram,size=192M,mem-path={ram},share=on" in spec.extra_args
    assert made.labels()["sweep_step"] == "2" and made.provenance()["tier"] == "db"
    # Not booted: no guest, so no QEMU pid yet.
    assert made.capabilities().vm_pid() is None
