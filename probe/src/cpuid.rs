//! CPUID helpers (x86_64 only).
#![cfg(target_arch = "x86_64")]

pub use std::arch::x86_64::CpuidResult;

/// Execute CPUID with the given leaf and subleaf.
#[inline(always)]
pub fn cpuid(leaf: u32, sub: u32) -> CpuidResult {
    // SAFETY: CPUID exists on every x86_64 CPU; it only writes registers.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::__cpuid_count(leaf, sub)
    }
}

/// CPUID.1:ECX bit 31, set by hypervisors for their guests.
pub fn hypervisor_bit() -> bool {
    cpuid(1, 0).ecx & (1 << 31) != 0
}

/// The 12-byte vendor signature of a register triple, NULs trimmed.
pub fn signature(regs: [u32; 3]) -> String {
    let mut bytes = Vec::with_capacity(12);
    for r in regs {
        bytes.extend_from_slice(&r.to_le_bytes());
    }
    String::from_utf8_lossy(&bytes).trim_end_matches('\0').to_string()
}

/// CPU vendor string from leaf 0 (EBX, EDX, ECX order).
pub fn vendor() -> String {
    let r = cpuid(0, 0);
    signature([r.ebx, r.edx, r.ecx])
}

/// Processor brand string from leaves 0x80000002..4, if present.
pub fn brand() -> Option<String> {
    if cpuid(0x8000_0000, 0).eax < 0x8000_0004 {
        return None;
    }
    let mut bytes = Vec::with_capacity(48);
    for leaf in 0x8000_0002u32..=0x8000_0004 {
        let r = cpuid(leaf, 0);
        for v in [r.eax, r.ebx, r.ecx, r.edx] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
    }
    let s = String::from_utf8_lossy(&bytes).trim_matches(char::from(0)).trim().to_string();
    (!s.is_empty()).then_some(s)
}
