"""VM-exit codes and their names.

SVM: the AMD64 Architecture Programmer's Manual, vol. 2, appendix C ("SVM Intercept Exit
Codes"). VMX: the Intel SDM, vol. 3, appendix C ("VMX Basic Exit Reasons"). Names are spelled
as Linux spells them (``SVM_EXIT_REASONS`` / ``VMX_EXIT_REASONS``), which is also what
``perf kvm stat`` prints, so a parsed perf report and a tracefs profile name a reason alike.
A code neither table knows is kept as ``unknown N``, never dropped.
"""

from __future__ import annotations

_EXCP = {
    0: "DE", 1: "DB", 3: "BP", 4: "OF", 5: "BR", 6: "UD", 7: "NM", 8: "DF", 10: "TS", 11: "NP",
    12: "SS", 13: "GP", 14: "PF", 16: "MF", 17: "AC", 18: "MC", 19: "XM", 20: "VE", 21: "CP",
    29: "VC", 30: "SX",
}  # fmt: skip


def _svm() -> dict[int, str]:
    t: dict[int, str] = {}
    for n in range(16):
        t[0x00 + n] = f"read_cr{n}"
        t[0x10 + n] = f"write_cr{n}"
        t[0x20 + n] = f"read_dr{n}"
        t[0x30 + n] = f"write_dr{n}"
        t[0x90 + n] = f"write_cr{n}_trap"
    for vec in range(32):
        t[0x40 + vec] = f"{_EXCP.get(vec, str(vec))} excp"
    t.update(
        {
            0x60: "interrupt", 0x61: "nmi", 0x62: "smi", 0x63: "init", 0x64: "vintr",
            0x65: "cr0_sel_write", 0x66: "read_idtr", 0x67: "read_gdtr", 0x68: "read_ldtr",
            0x69: "read_rt", 0x6A: "write_idtr", 0x6B: "write_gdtr", 0x6C: "write_ldtr",
            0x6D: "write_rt", 0x6E: "rdtsc", 0x6F: "rdpmc", 0x70: "pushf", 0x71: "popf",
            0x72: "cpuid", 0x73: "rsm", 0x74: "iret", 0x75: "swint", 0x76: "invd",
            0x77: "pause", 0x78: "hlt", 0x79: "invlpg", 0x7A: "invlpga", 0x7B: "io",
            0x7C: "msr", 0x7D: "task_switch", 0x7E: "ferr_freeze", 0x7F: "shutdown",
            0x80: "vmrun", 0x81: "hypercall", 0x82: "vmload", 0x83: "vmsave", 0x84: "stgi",
            0x85: "clgi", 0x86: "skinit", 0x87: "rdtscp", 0x88: "icebp", 0x89: "wbinvd",
            0x8A: "monitor", 0x8B: "mwait", 0x8C: "mwait_cond", 0x8D: "xsetbv", 0x8E: "rdpru",
            0x8F: "write_efer_trap", 0xA0: "invlpgb", 0xA1: "invlpgb_illegal",
            0xA2: "invpcid", 0xA3: "mcommit", 0xA4: "tlbsync", 0xA5: "buslock",
            0xA6: "idle_hlt", 0x400: "npf", 0x401: "avic_incomplete_ipi",
            0x402: "avic_unaccelerated_access", 0x403: "vmgexit",
            0xF0000000: "sw", 0xFFFFFFFF: "invalid_guest_state",
        }
    )  # fmt: skip
    return t


SVM_EXIT_REASONS: dict[int, str] = _svm()

VMX_EXIT_REASONS: dict[int, str] = {
    0: "EXCEPTION_NMI", 1: "EXTERNAL_INTERRUPT", 2: "TRIPLE_FAULT", 3: "INIT_SIGNAL",
    4: "SIPI_SIGNAL", 5: "IO_SMI", 6: "OTHER_SMI", 7: "INTERRUPT_WINDOW", 8: "NMI_WINDOW",
    9: "TASK_SWITCH", 10: "CPUID", 11: "GETSEC", 12: "HLT", 13: "INVD", 14: "INVLPG",
    15: "RDPMC", 16: "RDTSC", 17: "RSM", 18: "VMCALL", 19: "VMCLEAR", 20: "VMLAUNCH",
    21: "VMPTRLD", 22: "VMPTRST", 23: "VMREAD", 24: "VMRESUME", 25: "VMWRITE", 26: "VMOFF",
    27: "VMON", 28: "CR_ACCESS", 29: "DR_ACCESS", 30: "IO_INSTRUCTION", 31: "MSR_READ",
    32: "MSR_WRITE", 33: "INVALID_STATE", 34: "MSR_LOAD_FAIL", 36: "MWAIT_INSTRUCTION",
    37: "MONITOR_TRAP_FLAG", 39: "MONITOR_INSTRUCTION", 40: "PAUSE_INSTRUCTION",
    41: "MCE_DURING_VMENTRY", 43: "TPR_BELOW_THRESHOLD", 44: "APIC_ACCESS", 45: "EOI_INDUCED",
    46: "GDTR_IDTR", 47: "LDTR_TR", 48: "EPT_VIOLATION", 49: "EPT_MISCONFIG", 50: "INVEPT",
    51: "RDTSCP", 52: "PREEMPTION_TIMER", 53: "INVVPID", 54: "WBINVD", 55: "XSETBV",
    56: "APIC_WRITE", 57: "RDRAND", 58: "INVPCID", 59: "VMFUNC", 60: "ENCLS", 61: "RDSEED",
    62: "PML_FULL", 63: "XSAVES", 64: "XRSTORS", 65: "PCONFIG", 66: "SPP", 67: "UMWAIT",
    68: "TPAUSE", 69: "LOADIWKEY", 70: "ENCLV", 72: "ENQCMD_PASID_FAIL",
    73: "ENQCMDS_PASID_FAIL", 74: "BUS_LOCK", 75: "NOTIFY", 76: "SEAMCALL", 77: "TDCALL",
}  # fmt: skip

TABLES = {"svm": SVM_EXIT_REASONS, "vmx": VMX_EXIT_REASONS}


def reason_name(isa: str, code: int) -> str:
    """The name of exit ``code`` under ``isa`` (svm | vmx), or ``unknown N``.

    VMX reports a full exit reason whose low 16 bits are the basic reason (bit 31 marks a
    failed VM entry); the name is the basic reason's.
    """
    table = TABLES.get(isa.lower())
    if table is None:
        return f"unknown {code}"
    key = code & 0xFFFF if isa.lower() == "vmx" else code
    name = table.get(key)
    return name if name is not None else f"unknown {code}"


def reason_code(isa: str, name: str) -> int | None:
    """The code of reason ``name`` (as the kernel and perf spell it), or None."""
    if name.startswith("unknown "):
        tail = name.removeprefix("unknown ").strip()
        return int(tail) if tail.isdigit() else None
    table = TABLES.get(isa.lower(), {})
    for code, known in table.items():
        if known == name:
            return code
    return None
