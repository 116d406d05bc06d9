"""What this machine offers, for `vmtax env`, `vmtax probes`, `vmtax image` and `vmtax
workloads`: the agent's view of it, the guest images it builds and caches, and which
workloads' programs it has."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from vmtax.contract import Fingerprint, ProbeInfo
from vmtax.targets.agent import fingerprint, list_probes
from vmtax.targets.base import find_agent
from vmtax.targets.images import Image, build_nested, cache_dir, list_images
from vmtax.targets.local import LocalTarget
from vmtax.workloads import REGISTRY, image_contents
from vmtax.workloads.oltp import pg_bin

IMAGE_MODES = ("minimal", "full")


def environment() -> Fingerprint:
    """What the agent detects about this machine: hypervisor, nesting, CPU, memory."""
    return fingerprint(LocalTarget())


def probes() -> list[ProbeInfo]:
    """The probes the agent on this machine offers."""
    return list_probes(LocalTarget())


def build_image(mode: str, depth: int, *, kernel: str | None, agent: str | None) -> Image:
    """The image `vmtax run` boots (the agent and every workload's servers), built or found
    in the cache: ``minimal`` for L1, ``full`` holding ``depth`` levels (2 or 3)."""
    levels = 1 if mode == "minimal" else depth
    return build_nested(find_agent(agent), levels, kernel=kernel, contents=image_contents())


def images() -> tuple[Path, list[Image]]:
    """The image cache and the images in it, newest first."""
    return cache_dir(), list_images()


def workloads() -> list[dict[str, Any]]:
    """Each workload's contract, presets and needs, which of its programs are missing here,
    and whether it runs in guests (else only at L0, its server here)."""
    rows = []
    for w in REGISTRY.values():
        missing = [n for n in w.needs if not shutil.which(n) and pg_bin(n) == n]
        rows.append(
            {
                **w.info().model_dump(mode="json"),
                "presets": w.presets,
                "needs": list(w.needs),
                "missing": missing,
                "runs_in_guests": w.runs_in_guests,
            }
        )
    return rows
