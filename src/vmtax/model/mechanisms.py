"""Which probe stands for which of study C's microbenchmarks, and which exit classes DVH's
virtual hardware lets L0 handle without the guest hypervisor."""

from __future__ import annotations

from vmtax.errors import UsageError

# Probe -> study C microbenchmark (see plan/suites/dvh-micro.toml).
MECHANISMS = {
    "cpuid": "Hypercall",
    "io": "DevNotify",
    "timer": "ProgramTimer",
    "wakeup": "SendIPI",
}
# The null exit: trap, do nothing, resume. Its single-level cost is the cost the model
# assumes for each exit a guest hypervisor causes when no exit profile says otherwise.
NULL = "Hypercall"
# The DVH classes (virtual hardware L0 provides to the nested VM directly) each mechanism
# needs to be handled by L0 alone. Hypercall has none: a hypercall is addressed to the guest
# hypervisor, so it must be forwarded whatever virtual hardware there is.
DVH = {
    "Hypercall": (),
    "DevNotify": ("virtual passthrough",),
    "ProgramTimer": ("virtual timer",),
    "SendIPI": ("virtual IPI", "virtual idle"),
}


def mechanism(name: str) -> str:
    """The study-C microbenchmark of a probe or benchmark name; UsageError when it has none."""
    if name in DVH:
        return name
    if name in MECHANISMS:
        return MECHANISMS[name]
    known = ", ".join(f"{p} ({b})" for p, b in MECHANISMS.items())
    raise UsageError(
        f"probe {name!r} has no exit mechanism the nested-cost model knows; use one of {known}"
    )


def dvh_direct(bench: str) -> bool:
    """True when DVH's virtual hardware lets L0 handle this mechanism's exit alone."""
    return bool(DVH[mechanism(bench)])
