"""A workload's recipe: everything it needs from a machine, declared once in its own file.

`vmtax doctor`'s checks, the refusal of a run whose programs are missing, and what guest
images carry are all read from the recipes, so adding a workload is one file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from vmtax.doctor import Capability


@dataclass(frozen=True)
class Needs:
    """What a run needs of its target beyond the programs: a server it places there, a
    second vCPU (client and server side by side), root, or a network between the target and
    this machine."""

    server: bool = False
    vcpus: int = 1
    root: bool = False
    network: bool = False


@dataclass(frozen=True)
class Recipe:
    """Programs (looked up on PATH where the server or tool runs), the Debian and Fedora
    packages that install them, the binaries and files a guest image carries for it (paths
    as Debian installs them), and its needs. ``checks`` are doctor's needs (``bin:NAME``,
    ``path:GLOB``) when the programs alone do not say it."""

    programs: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    fedora: tuple[str, ...] = ()
    binaries: tuple[str, ...] = ()
    files: Mapping[str, bytes] = field(default_factory=lambda: MappingProxyType({}))
    checks: tuple[str, ...] = ()
    needs: Needs = Needs()

    @property
    def agent_only(self) -> bool:
        """Nothing to install: only the agent runs, so it runs on any target."""
        return not self.programs

    def capability(self, name: str) -> Capability:
        """The recipe as one of doctor's capabilities, named after its workload."""
        checks = self.checks or tuple(f"bin:{p}" for p in self.programs)
        return Capability(name, self.packages, self.fedora, checks)
