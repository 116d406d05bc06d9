"""Target specs: where a plan runs, as plain data stored with it, and the Target objects built
from them (also by ``--resume``). The QEMU-level, SSH and fleet modules are imported only when
a plan asks for them, so a local run never depends on them.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

from vmtax.errors import VmtaxError
from vmtax.targets.base import Target
from vmtax.targets.images import AGENT_ONLY, ImageContents
from vmtax.targets.local import LocalTarget


def make_targets(
    specs: list[dict[str, Any]],
    *,
    accept_new_host_key: bool = False,
    contents: ImageContents = AGENT_ONLY,
) -> tuple[list[Target], int | None]:
    """Build the targets a plan names; returns them and the fleet's concurrency limit, if a
    fleet file set one. Guests vmtax boots carry ``contents`` in their images."""
    out: list[Target] = []
    limit: int | None = None
    i = 0
    while i < len(specs):
        spec = specs[i]
        kind = spec.get("kind")
        if kind == "local":
            out.append(LocalTarget(level=spec.get("level", "L0")))
            i += 1
        elif kind == "level":
            # Consecutive levels with the same options are provisioned by one call.
            group = [spec]
            while i + len(group) < len(specs) and _same_level_options(specs[i + len(group)], spec):
                group.append(specs[i + len(group)])
            level_targets = _optional("vmtax.targets.levels", "level_targets", "--levels")
            made = list(
                level_targets(
                    [g["level"] for g in group],
                    preset=spec["preset"],
                    accel=spec["accel"],
                    inner_accel=spec.get("inner_accel", "tcg"),
                    guest_net=spec.get("guest_net", ""),
                    contents=contents,
                    sets=[g.get("set") for g in group],
                )
            )
            if len(made) != len(group):
                raise VmtaxError(f"asked for {len(group)} levels but got {len(made)} targets")
            out.extend(made)
            i += len(group)
        elif kind == "ssh":
            ssh_target = _optional("vmtax.targets.ssh", "SshTarget", "--target ssh://...")
            out.append(ssh_target(spec["url"], accept_new_host_key=accept_new_host_key))
            i += 1
        elif kind == "fleet":
            load_fleet = _optional("vmtax.targets.fleet", "load_fleet", "--targets")
            loaded = load_fleet(spec["path"])
            fleet, limit = _fleet_parts(loaded)
            count = sum(1 for s in specs if s.get("kind") == "fleet" and s["path"] == spec["path"])
            if len(fleet) != count:
                raise VmtaxError(
                    f"{spec['path']} now lists {len(fleet)} hosts; the plan was made for {count}"
                )
            out.extend(fleet)
            i += count
        else:
            raise VmtaxError(f"unknown target kind in plan: {kind!r}")
    return out, limit


def fleet_size(path: str) -> tuple[int, int | None]:
    """How many hosts a fleet file lists, and its concurrency limit."""
    load_fleet = _optional("vmtax.targets.fleet", "load_fleet", "--targets")
    fleet, limit = _fleet_parts(load_fleet(path))
    for t in fleet:
        with contextlib.suppress(Exception):
            t.close()
    return len(fleet), limit


def _fleet_parts(loaded: Any) -> tuple[list[Target], int | None]:
    # load_fleet may return the targets alone, (targets, limit), or an object with both.
    if isinstance(loaded, tuple):
        return list(loaded[0]), loaded[1]
    if hasattr(loaded, "targets"):
        return list(loaded.targets), getattr(loaded, "max_concurrency", None)
    return list(loaded), None


def _same_level_options(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (
        a.get("kind") == "level"
        and a.get("preset") == b.get("preset")
        and a.get("accel") == b.get("accel")
        and a.get("inner_accel", "tcg") == b.get("inner_accel", "tcg")
        and a.get("guest_net", "") == b.get("guest_net", "")
    )


def _optional(module: str, attr: str, option: str) -> Any:
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        raise VmtaxError(
            f"{option} needs {module}.{attr}, which this installation of vmtax does not have"
        ) from None
