"""The one factory of targets: the Target objects built from typed target specs
(``vmtax.targets.spec``), for a plan (also by ``--resume``, from the stored JSON) and for a
sweep's guests alike. The QEMU-level, SSH and fleet modules are imported only when a plan
asks for them, so a local run never depends on them.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Sequence
from typing import Any, cast

from vmtax.errors import VmtaxError
from vmtax.targets.base import Target
from vmtax.targets.images import AGENT_ONLY, Image, ImageContents
from vmtax.targets.local import LocalTarget
from vmtax.targets.spec import (
    FleetHostSpec,
    LevelSpec,
    LocalSpec,
    SizedGuestSpec,
    SshSpec,
    TargetSpec,
    parse_spec,
)


def make_targets(
    specs: Sequence[TargetSpec | dict[str, Any]],
    *,
    accept_new_host_key: bool = False,
    contents: ImageContents = AGENT_ONLY,
    image: Image | None = None,
    boot_timeout: float | None = None,
) -> tuple[list[Target], int | None]:
    """Build the targets ``specs`` name; returns them and the fleet's concurrency limit, if a
    fleet file set one. Guests vmtax boots carry ``contents`` in their images; a sized
    guest boots ``image`` when given (a sweep builds its guests' image once) and waits
    ``boot_timeout`` for its agent (None: the default)."""
    typed = [parse_spec(s) for s in specs]
    out: list[Target] = []
    limit: int | None = None
    i = 0
    while i < len(typed):
        spec = typed[i]
        match spec:
            case LocalSpec():
                out.append(LocalTarget(level=spec.level, name=spec.name or "local"))
                i += 1
            case SizedGuestSpec():
                sized_guest = _optional("vmtax.targets.sized", "sized_guest", "a sweep's guests")
                out.append(
                    sized_guest(spec, image=image, contents=contents, boot_timeout=boot_timeout)
                )
                i += 1
            case LevelSpec():
                # Consecutive levels with the same options are provisioned by one call.
                group = [spec]
                while i + len(group) < len(typed) and spec.same_options(typed[i + len(group)]):
                    group.append(cast(LevelSpec, typed[i + len(group)]))
                level_targets = _optional("vmtax.targets.levels", "level_targets", "--levels")
                made = list(
                    level_targets(
                        [g.level for g in group],
                        preset=spec.preset,
                        accel=spec.accel,
                        inner_accel=spec.inner_accel,
                        guest_net=spec.guest_net,
                        contents=contents,
                        sets=[g.set for g in group],
                    )
                )
                if len(made) != len(group):
                    raise VmtaxError(f"asked for {len(group)} levels but got {len(made)} targets")
                out.extend(made)
                i += len(group)
            case SshSpec():
                ssh_target = _optional("vmtax.targets.ssh", "SshTarget", "--target ssh://...")
                out.append(
                    ssh_target(
                        spec.url,
                        accept_new_host_key=accept_new_host_key,
                        known_hosts=spec.known_hosts,
                        identity=spec.key,
                    )
                )
                i += 1
            case FleetHostSpec():
                load_fleet = _optional("vmtax.targets.fleet", "load_fleet", "--targets")
                loaded = load_fleet(spec.path, spec.limit)
                fleet, limit = _fleet_parts(loaded)
                count = sum(
                    1 for s in typed if isinstance(s, FleetHostSpec) and s.path == spec.path
                )
                if len(fleet) != count:
                    _release(loaded)
                    raise VmtaxError(
                        f"{spec.path} now lists {len(fleet)} hosts; the plan was made for {count}"
                    )
                out.extend(fleet)
                i += count
    return out, limit


def fleet_size(path: str, limit_to: str | None = None) -> tuple[int, int | None]:
    """How many hosts a fleet file or inventory lists (within --limit), and its forks."""
    load_fleet = _optional("vmtax.targets.fleet", "load_fleet", "--targets")
    loaded = load_fleet(path, limit_to)
    fleet, limit = _fleet_parts(loaded)
    for t in fleet:
        with contextlib.suppress(Exception):
            t.close()
    _release(loaded)  # only counted: the run loads its own
    return len(fleet), limit


def _release(loaded: Any) -> None:
    """Remove what loading a fleet made (a hosts.toml's translated inventory), if anything."""
    if hasattr(loaded, "release"):
        loaded.release()


def _fleet_parts(loaded: Any) -> tuple[list[Target], int | None]:
    # load_fleet may return the targets alone, (targets, limit), or an object with both.
    if isinstance(loaded, tuple):
        return list(loaded[0]), loaded[1]
    if hasattr(loaded, "targets"):
        return list(loaded.targets), getattr(loaded, "max_concurrency", None)
    return list(loaded), None


def _optional(module: str, attr: str, option: str) -> Any:
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        raise VmtaxError(
            f"{option} needs {module}.{attr}, which this installation of vmtax does not have"
        ) from None
