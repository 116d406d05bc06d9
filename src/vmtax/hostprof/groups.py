"""Study E's grouping of exit reasons: MMIO, Interrupt, Instruction emulation, Page fault,
CR access, Halt, MMU, I/O and Other (docs/exits.md explains each choice).

The study's monitor ran on shadow and extended page tables; on KVM the same classes are:

- **MMIO**: nested-paging faults, as the study files EPT violations (its
  ``vmexitEptViol_COST``) under MMIO: NPF (SVM), EPT_VIOLATION and EPT_MISCONFIG (VMX). KVM
  maps emulated-device pages so that every access to them exits this way; the faults that
  populate guest memory land here too, but once a guest's memory is mapped (a probe run's
  steady state) they are device accesses.
- **Interrupt**: external interrupts, NMIs, interrupt/NMI windows, APIC access and writes,
  EOI and TPR exits, INIT/SIPI, AVIC exits, the VMX preemption timer.
- **Instruction emulation**: instructions the hypervisor executes for the guest: CPUID,
  MSR reads and writes (this includes TSC-deadline and x2APIC ICR writes), RDTSC(P), RDPMC,
  XSETBV, descriptor-table and debug-register accesses, and the virtualization instructions
  a guest hypervisor executes (VMRUN, VMLOAD ..., VMREAD, VMWRITE ...).
- **Page fault**: intercepted #PF exceptions (what shadow paging costs).
- **CR access**: control-register reads and writes (and their SVM trap variants, EFER).
- **Halt**: HLT, MWAIT, idle HLT, UMWAIT/TPAUSE.
- **MMU**: TLB and paging maintenance: INVLPG(A/B), INVPCID, TLBSYNC, PML full,
  INVEPT/INVVPID.
- **I/O**: port I/O (SVM IOIO, VMX IO_INSTRUCTION).
- **Other**: the rest (other exceptions, PAUSE, shutdown, SMIs, unknown codes ...).
"""

from __future__ import annotations

GROUPS: tuple[str, ...] = (
    "MMIO", "Interrupt", "Instruction emulation", "Page fault", "CR access", "Halt", "MMU",
    "I/O", "Other",
)  # fmt: skip

_BY_NAME: dict[str, str] = {}


def _add(group: str, *names: str) -> None:
    for n in names:
        _BY_NAME[n] = group


_add("MMIO", "npf", "EPT_MISCONFIG", "EPT_VIOLATION")
_add(
    "Interrupt",
    "interrupt", "nmi", "init", "vintr", "avic_incomplete_ipi", "avic_unaccelerated_access",
    "EXTERNAL_INTERRUPT", "INIT_SIGNAL", "SIPI_SIGNAL", "INTERRUPT_WINDOW", "NMI_WINDOW",
    "APIC_ACCESS", "APIC_WRITE", "EOI_INDUCED", "TPR_BELOW_THRESHOLD", "PREEMPTION_TIMER",
)  # fmt: skip
_add(
    "Instruction emulation",
    "cpuid", "msr", "rdtsc", "rdtscp", "rdpmc", "pushf", "popf", "iret", "swint", "invd",
    "wbinvd", "xsetbv", "rdpru", "icebp", "rsm", "task_switch", "monitor", "hypercall",
    "vmrun", "vmload", "vmsave", "stgi", "clgi", "skinit", "vmgexit", "mcommit",
    "read_idtr", "read_gdtr", "read_ldtr", "read_rt", "write_idtr", "write_gdtr",
    "write_ldtr", "write_rt",
    "CPUID", "MSR_READ", "MSR_WRITE", "RDTSC", "RDTSCP", "RDPMC", "INVD", "WBINVD", "XSETBV",
    "RDRAND", "RDSEED", "XSAVES", "XRSTORS", "GDTR_IDTR", "LDTR_TR", "DR_ACCESS", "GETSEC",
    "RSM", "TASK_SWITCH", "MONITOR_INSTRUCTION", "VMCALL", "VMCLEAR", "VMLAUNCH", "VMPTRLD",
    "VMPTRST", "VMREAD", "VMRESUME", "VMWRITE", "VMOFF", "VMON", "VMFUNC", "ENCLS", "ENCLV",
    "PCONFIG", "LOADIWKEY", "SEAMCALL", "TDCALL",
)  # fmt: skip
_add("Page fault", "PF excp")
_add("CR access", "cr0_sel_write", "write_efer_trap", "CR_ACCESS")
_add("Halt", "hlt", "idle_hlt", "mwait", "mwait_cond")
_add("Halt", "HLT", "MWAIT_INSTRUCTION", "UMWAIT", "TPAUSE")
_add(
    "MMU",
    "invlpg", "invlpga", "invlpgb", "invlpgb_illegal", "invpcid", "tlbsync",
    "INVLPG", "INVPCID", "PML_FULL", "INVEPT", "INVVPID",
)  # fmt: skip
_add("I/O", "io", "IO_INSTRUCTION")
# KVM's own per-vCPU counters (``kvmstats``): each counts one kind of exit.
_add("Halt", "halt_exits")
_add("Interrupt", "irq_exits", "irq_window_exits", "nmi_window_exits")
_add("I/O", "io_exits")
_add("MMIO", "mmio_exits")
_add("Instruction emulation", "hypercalls", "nested_run")


def group_of(reason: str) -> str:
    """Study E's group of a reason name (see ``reasons``); ``Other`` for the rest."""
    if reason in _BY_NAME:
        return _BY_NAME[reason]
    if reason.startswith(("read_cr", "write_cr")):
        return "CR access"
    if reason.startswith(("read_dr", "write_dr")):
        return "Instruction emulation"
    return "Other"
