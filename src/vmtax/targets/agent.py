"""What the agent on a target says about itself: its environment fingerprint and the probes
it offers. The runner asks both before a plan starts; a workload asks for the fingerprint
when it needs the target's TSC rate. And the agent binary's digest, by which an SSH host or
a fleet's hosts are found to have this agent already."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from vmtax.contract import Fingerprint, ProbeInfo
from vmtax.targets.base import Target, TargetError

#: How long the agent may take to fingerprint its environment.
ENV_TIMEOUT_S = 120.0


def fingerprint(target: Target, timeout: float = ENV_TIMEOUT_S) -> Fingerprint:
    """Ask the agent on ``target`` for its environment fingerprint, with what only this
    controller knows of the target added (``Target.environment``: a guest's QEMU)."""
    text = "".join(target.run_agent(["env", "--format", "json"], timeout)).strip()
    try:
        found = Fingerprint.model_validate_json(text)
    except ValidationError as exc:
        tail = f": {target.last_stderr.splitlines()[-1]}" if target.last_stderr else ""
        reason = "no output" if not text else exc.errors()[0]["msg"]
        raise TargetError(
            f"{target.name}: bad fingerprint from the agent ({reason}){tail}"
        ) from None
    known = target.environment()
    if not known:
        return found
    return Fingerprint.model_validate(found.model_dump(by_alias=True) | known)


def list_probes(target: Target, timeout: float = 60.0) -> list[ProbeInfo]:
    """The probes the agent on ``target`` offers."""
    text = "".join(target.run_agent(["list", "--format", "json"], timeout)).strip()
    try:
        return TypeAdapter(list[ProbeInfo]).validate_json(text)
    except ValidationError:
        tail = f": {target.last_stderr.splitlines()[-1]}" if target.last_stderr else ""
        raise TargetError(f"{target.name}: the agent's probe list is unreadable{tail}") from None


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file (the agent binary), read a MiB at a time."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
