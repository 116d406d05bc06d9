//! The environment fingerprint: what the agent runs on. Every source may be missing (a
//! busybox initramfs has only /proc and /sys, a container may hide DMI), so every field
//! degrades to null, and the hypervisor evidence says which sources were unreadable.

use crate::output::{Confidence, Cpu, Fingerprint, Hypervisor, Nesting, AGENT_VERSION};
use std::fs;

/// Bare metal CPUID costs ~100-250 cycles; an L1 guest (hardware-assisted VM exit) pays
/// ~1,000 to ~10,000+; a nested guest tens of thousands (DVH, Table 3: 37,733 cycles for a
/// nested hypercall). These bounds split the three cases; docs/contract.md explains them.
pub const BARE_METAL_MAX_CYCLES: f64 = 1_000.0;
pub const NESTED_MIN_CYCLES: f64 = 20_000.0;

/// First line of a file, trimmed; None when missing, unreadable or empty.
pub fn read_trim(path: &str) -> Option<String> {
    let s = fs::read_to_string(path).ok()?;
    let s = s.trim().to_string();
    (!s.is_empty()).then_some(s)
}

pub fn fingerprint() -> Fingerprint {
    let (hypervisor, tcg) = hypervisor();
    let nesting = nesting(&hypervisor, tcg);
    fingerprint_with(hypervisor, nesting)
}

/// The fingerprint without the nesting estimate, whose 3,000 timed CPUIDs cost about 20 ms
/// on a VM and seconds two levels down: a run's header, when `env` has already given it.
pub fn fingerprint_brief() -> Fingerprint {
    let (hypervisor, _) = hypervisor();
    let nesting = Nesting {
        depth: None,
        basis: "not measured in this run (--brief-env): see the machine's env".into(),
        confidence: Confidence::None,
        cpuid_cycles: None,
    };
    fingerprint_with(hypervisor, nesting)
}

fn fingerprint_with(hypervisor: Hypervisor, nesting: Nesting) -> Fingerprint {
    let uts = uname();
    Fingerprint {
        agent_version: AGENT_VERSION.to_string(),
        arch: std::env::consts::ARCH.to_string(),
        hostname: uts.0,
        hypervisor,
        nesting,
        cpu: cpu(),
        memory_bytes: memory_bytes(),
        kernel: uts.1,
        clocksource: read_trim("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        thp: read_trim("/sys/kernel/mm/transparent_hugepage/enabled").and_then(|s| bracketed(&s)),
        steal_ticks: steal_ticks(None),
    }
}

/// The kernel's random id of this boot: everything a boot fixes (memory placement, huge
/// pages, the host pages backing a guest) is shared by the runs that carry one id. None
/// when /proc is not mounted or the kernel has no random driver.
pub fn boot_id() -> Option<String> {
    read_trim("/proc/sys/kernel/random/boot_id")
}

/// The selected word of a sysfs choice list such as "always [madvise] never".
pub fn bracketed(s: &str) -> Option<String> {
    let start = s.find('[')?;
    let end = s[start..].find(']')? + start;
    Some(s[start + 1..end].to_string())
}

fn uname() -> (String, String) {
    // SAFETY: utsname is plain old data; uname fills it with NUL-terminated strings.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return ("unknown".into(), "unknown".into());
    }
    let field = |f: &[libc::c_char]| -> String {
        let bytes: Vec<u8> = f.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (field(&u.nodename), field(&u.release))
}

fn memory_bytes() -> u64 {
    // SAFETY: sysinfo is plain old data, filled by the syscall.
    let mut si: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: si is a valid, writable struct sysinfo.
    if unsafe { libc::sysinfo(&mut si) } != 0 {
        return 0;
    }
    si.totalram as u64 * si.mem_unit.max(1) as u64
}

/// Steal ticks (USER_HZ) from /proc/stat: all CPUs, or the sum over `cpus`.
pub fn steal_ticks(cpus: Option<&[usize]>) -> Option<u64> {
    let text = fs::read_to_string("/proc/stat").ok()?;
    parse_steal(&text, cpus)
}

pub fn parse_steal(text: &str, cpus: Option<&[usize]>) -> Option<u64> {
    let mut total = 0u64;
    let mut found = false;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let Some(name) = it.next() else { continue };
        let wanted = match cpus {
            None => name == "cpu",
            Some(list) => {
                name.strip_prefix("cpu").and_then(|n| n.parse::<usize>().ok()).is_some_and(|n| list.contains(&n))
            }
        };
        if wanted {
            // user nice system idle iowait irq softirq steal
            total += it.nth(7)?.parse::<u64>().ok()?;
            found = true;
        }
    }
    found.then_some(total)
}

/// Online logical CPUs (sysconf, else the affinity mask).
pub fn logical_cpus() -> u32 {
    // SAFETY: sysconf has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        return n as u32;
    }
    crate::affinity::allowed().len().max(1) as u32
}

fn cpuinfo_field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string()).filter(|v| !v.is_empty())
    })
}

/// The microcode revision of the first CPU in /proc/cpuinfo text (`microcode : 0xf0`); None
/// when the kernel shows none, as in many guests (the hypervisor loads the microcode).
pub fn microcode(cpuinfo: &str) -> Option<String> {
    cpuinfo_field(cpuinfo, "microcode")
}

fn cpu() -> Cpu {
    let info = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpuid::cpuid;
        let mut flags = Vec::new();
        let l1 = cpuid(1, 0);
        if l1.ecx & (1 << 31) != 0 {
            flags.push("hypervisor".to_string());
        }
        if l1.ecx & (1 << 5) != 0 {
            flags.push("vmx".to_string());
        }
        let ext_max = cpuid(0x8000_0000, 0).eax;
        if ext_max >= 0x8000_0001 && cpuid(0x8000_0001, 0).ecx & (1 << 2) != 0 {
            flags.push("svm".to_string());
        }
        let invariant = (ext_max >= 0x8000_0007).then(|| cpuid(0x8000_0007, 0).edx & (1 << 8) != 0);
        Cpu {
            model: cpuinfo_field(&info, "model name").or_else(crate::cpuid::brand).unwrap_or_else(|| "unknown".into()),
            vendor: crate::cpuid::vendor(),
            logical_cpus: logical_cpus(),
            tsc_hz: crate::clock::tsc_hz(),
            tsc_source: crate::clock::tsc_freq().map(|f| f.source),
            tsc_invariant: invariant,
            virt_flags: flags,
            microcode: microcode(&info),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let model = cpuinfo_field(&info, "model name")
            .or_else(|| cpuinfo_field(&info, "machine"))
            .or_else(|| cpuinfo_field(&info, "CPU part"))
            .unwrap_or_else(|| "unknown".into());
        let vendor = cpuinfo_field(&info, "vendor_id")
            .or_else(|| cpuinfo_field(&info, "CPU implementer"))
            .unwrap_or_else(|| "unknown".into());
        let flags = cpuinfo_field(&info, "features")
            .map(|f| f.split_whitespace().filter(|w| *w == "sie").map(String::from).collect())
            .unwrap_or_default();
        Cpu {
            model,
            vendor,
            logical_cpus: logical_cpus(),
            tsc_hz: None,
            tsc_invariant: None,
            tsc_source: None,
            virt_flags: flags,
            microcode: microcode(&info),
        }
    }
}

/// Hypervisor vendor for a CPUID 0x40000000 signature.
pub fn vendor_of_signature(sig: &str) -> Option<&'static str> {
    Some(match sig {
        "KVMKVMKVM" => "KVM",
        "Microsoft Hv" => "Microsoft Hyper-V",
        "VMwareVMware" => "VMware",
        "XenVMMXenVMM" => "Xen",
        "TCGTCGTCGTCG" => "QEMU TCG",
        "bhyve bhyve" => "bhyve",
        "ACRNACRNACRN" => "ACRN",
        " lrpepyh  vr" | "prl hyperv" => "Parallels",
        "VBoxVBoxVBox" => "VirtualBox",
        "QNXQVMBSQG" => "QNX",
        "Jailhouse" => "Jailhouse",
        _ => return None,
    })
}

/// Hypervisor vendor suggested by a DMI sys_vendor / product_name pair.
pub fn vendor_of_dmi(sys_vendor: &str, product: &str) -> Option<&'static str> {
    let v = sys_vendor.to_ascii_lowercase();
    let p = product.to_ascii_lowercase();
    Some(if p.contains("kvm") {
        "KVM"
    } else if v.contains("qemu") {
        "QEMU"
    } else if v.contains("vmware") {
        "VMware"
    } else if v.contains("microsoft") && p.contains("virtual machine") {
        "Microsoft Hyper-V"
    } else if v.contains("xen") {
        "Xen"
    } else if v.contains("innotek") || p.contains("virtualbox") {
        "VirtualBox"
    } else if v.contains("parallels") {
        "Parallels"
    } else if p.contains("bhyve") || v.contains("bhyve") {
        "bhyve"
    } else if v.contains("amazon ec2") || v.contains("google") {
        "KVM"
    } else {
        return None;
    })
}

/// s390x /proc/sysinfo: the control programs of the VM levels (VM00, VM01, ...) and
/// whether an LPAR is reported.
pub fn parse_sysinfo(text: &str) -> (Vec<String>, bool) {
    let mut levels: Vec<(String, String)> = Vec::new();
    let mut lpar = false;
    for line in text.lines() {
        let Some((key, val)) = line.split_once(':') else { continue };
        let key = key.trim();
        if key.starts_with("LPAR ") {
            lpar = true;
        }
        if let Some(rest) = key.strip_prefix("VM") {
            if let Some((lvl, what)) = rest.split_once(' ') {
                if lvl.len() == 2 && lvl.chars().all(|c| c.is_ascii_digit()) && what == "Control Program" {
                    levels.push((lvl.to_string(), val.split_whitespace().collect::<Vec<_>>().join(" ")));
                }
            }
        }
    }
    levels.sort();
    (levels.into_iter().map(|(_, cp)| cp).collect(), lpar)
}

/// The hypervisor and whether it is QEMU's TCG emulator.
fn hypervisor() -> (Hypervisor, bool) {
    let mut evidence = Vec::new();
    let mut vendor: Option<String> = None;
    let mut signature: Option<String> = None;
    let mut detected = false;

    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpuid::{cpuid, hypervisor_bit, signature as sig_of};
        if hypervisor_bit() {
            detected = true;
            evidence.push("cpuid 0x1 ecx bit 31 (hypervisor present) set".to_string());
            let r = cpuid(0x4000_0000, 0);
            let sig = sig_of([r.ebx, r.ecx, r.edx]);
            if !sig.is_empty() {
                evidence.push(format!("cpuid 0x40000000 signature {sig}"));
                vendor = vendor_of_signature(&sig).map(String::from);
                // KVM with Hyper-V enlightenments shows Hyper-V first and itself at 0x40000100.
                if sig == "Microsoft Hv" {
                    let r2 = cpuid(0x4000_0100, 0);
                    let sig2 = sig_of([r2.ebx, r2.ecx, r2.edx]);
                    if sig2 == "KVMKVMKVM" {
                        evidence.push("cpuid 0x40000100 signature KVMKVMKVM".to_string());
                        vendor = Some("KVM".into());
                    }
                }
                signature = Some(sig);
            }
        } else {
            evidence.push("cpuid 0x1 ecx bit 31 (hypervisor present) clear".to_string());
        }
    }

    let sys_vendor = read_trim("/sys/class/dmi/id/sys_vendor");
    let product = read_trim("/sys/class/dmi/id/product_name");
    match (&sys_vendor, &product) {
        (None, None) => evidence.push("/sys/class/dmi/id: unavailable".to_string()),
        _ => {
            let (v, p) = (sys_vendor.clone().unwrap_or_default(), product.clone().unwrap_or_default());
            evidence.push(format!("/sys/class/dmi/id/sys_vendor: {v}"));
            evidence.push(format!("/sys/class/dmi/id/product_name: {p}"));
            if let Some(dv) = vendor_of_dmi(&v, &p) {
                detected = true;
                vendor.get_or_insert_with(|| dv.to_string());
            }
        }
    }
    match read_trim("/sys/hypervisor/type") {
        Some(t) => {
            evidence.push(format!("/sys/hypervisor/type: {t}"));
            detected = true;
            if t.eq_ignore_ascii_case("xen") {
                vendor.get_or_insert_with(|| "Xen".into());
            }
        }
        None => evidence.push("/sys/hypervisor/type: unavailable".to_string()),
    }
    if fs::metadata("/proc/xen").is_ok() {
        evidence.push("/proc/xen present".to_string());
        detected = true;
        vendor.get_or_insert_with(|| "Xen".into());
    }
    if let Ok(text) = fs::read_to_string("/proc/sysinfo") {
        let (levels, lpar) = parse_sysinfo(&text);
        if lpar {
            evidence.push("/proc/sysinfo: LPAR".to_string());
        }
        if let Some(cp) = levels.last() {
            evidence.push(format!("/proc/sysinfo: {} VM level(s), innermost control program {cp}", levels.len()));
            detected = true;
            vendor.get_or_insert_with(|| cp.split_whitespace().next().unwrap_or(cp).to_string());
        } else if lpar {
            detected = true;
            vendor.get_or_insert_with(|| "PR/SM (LPAR)".into());
        }
    }
    let tcg = signature.as_deref() == Some("TCGTCGTCGTCG");
    (Hypervisor { detected, vendor, signature, evidence }, tcg)
}

/// Nesting depth from the CPUID round trip (x86) against the documented bounds.
pub fn classify_cpuid(cycles: f64, hv_bit: bool) -> (u32, Confidence, String) {
    let (depth, where_) = if cycles < BARE_METAL_MAX_CYCLES {
        (0, format!("below the {BARE_METAL_MAX_CYCLES:.0}-cycle bare-metal bound"))
    } else if cycles < NESTED_MIN_CYCLES {
        (
            1,
            format!(
                "above the {BARE_METAL_MAX_CYCLES:.0}-cycle bare-metal bound and below the {NESTED_MIN_CYCLES:.0}-cycle nested bound"
            ),
        )
    } else {
        (2, format!("above the {NESTED_MIN_CYCLES:.0}-cycle nested bound (depth 2 or more)"))
    };
    // Near a bound, or contradicting the hypervisor bit, the guess is weak.
    let near = (cycles / BARE_METAL_MAX_CYCLES).ln().abs() < 0.4 || (cycles / NESTED_MIN_CYCLES).ln().abs() < 0.4;
    let consistent = (depth == 0) != hv_bit;
    let confidence = match (consistent, near) {
        (false, _) => Confidence::Low,
        (true, true) => Confidence::Low,
        (true, false) if depth == 0 => Confidence::High,
        (true, false) => Confidence::Medium,
    };
    (depth, confidence, format!("cpuid round trip {cycles:.0} cycles: {where_}"))
}

/// Median round-trip cost of CPUID leaf 0 in TSC cycles, timer overhead subtracted. Here and
/// not in cpuid.rs: it times with clock.rs, which itself uses cpuid.rs.
#[cfg(target_arch = "x86_64")]
fn roundtrip_cycles(count: usize) -> f64 {
    use crate::clock::{ticks_start, ticks_stop};
    let overhead = crate::clock::overhead_ticks();
    let mut v: Vec<f64> = (0..count)
        .map(|_| {
            let a = ticks_start();
            std::hint::black_box(crate::cpuid::cpuid(0, 0));
            let b = ticks_stop();
            b.wrapping_sub(a) as f64 - overhead
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn nesting(hv: &Hypervisor, tcg: bool) -> Nesting {
    if let Ok(text) = fs::read_to_string("/proc/sysinfo") {
        let (levels, lpar) = parse_sysinfo(&text);
        if lpar || !levels.is_empty() {
            return Nesting {
                depth: Some(levels.len() as u32),
                basis: format!(
                    "/proc/sysinfo lists {} VM level(s){}",
                    levels.len(),
                    if levels.is_empty() { String::new() } else { format!(": {}", levels.join(" > ")) }
                ),
                confidence: Confidence::High,
                cpuid_cycles: None,
            };
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        let cycles = roundtrip_cycles(3000);
        if tcg {
            return Nesting {
                depth: None,
                basis: format!(
                    "QEMU TCG (signature TCGTCGTCGTCG): CPUID is emulated, not trapped, so its {cycles:.0}-cycle cost says nothing about nesting; estimate unreliable"
                ),
                confidence: Confidence::None,
                cpuid_cycles: Some(cycles),
            };
        }
        let hv_bit = crate::cpuid::hypervisor_bit();
        let (depth, confidence, basis) = classify_cpuid(cycles, hv_bit);
        let _ = hv;
        Nesting { depth: Some(depth), basis, confidence, cpuid_cycles: Some(cycles) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = tcg;
        Nesting {
            depth: if hv.detected { None } else { Some(0) },
            basis: if hv.detected {
                "no CPUID on this architecture and no VM levels reported: depth unknown".into()
            } else {
                "no hypervisor evidence found".into()
            },
            confidence: if hv.detected { Confidence::None } else { Confidence::Low },
            cpuid_cycles: None,
        }
    }
}

/// Human-readable fingerprint for `env --format text`.
pub fn to_text(f: &Fingerprint) -> String {
    let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "unknown".into());
    let mut s = String::new();
    s.push_str(&format!("agent       vmtax-probe {} ({})\n", f.agent_version, f.arch));
    s.push_str(&format!("host        {}  kernel {}\n", f.hostname, f.kernel));
    s.push_str(&format!(
        "hypervisor  {}{}\n",
        if f.hypervisor.detected { opt(&f.hypervisor.vendor) } else { "none detected".into() },
        f.hypervisor.signature.as_ref().map(|s| format!(" (signature {s})")).unwrap_or_default()
    ));
    for e in &f.hypervisor.evidence {
        s.push_str(&format!("            - {e}\n"));
    }
    s.push_str(&format!(
        "nesting     depth {} ({} confidence): {}\n",
        f.nesting.depth.map(|d| d.to_string()).unwrap_or_else(|| "unknown".into()),
        serde_json::to_value(f.nesting.confidence).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
        f.nesting.basis
    ));
    s.push_str(&format!("cpu         {} ({}), {} logical CPUs\n", f.cpu.model, f.cpu.vendor, f.cpu.logical_cpus));
    if let Some(rev) = &f.cpu.microcode {
        s.push_str(&format!("microcode   {rev}\n"));
    }
    if let Some(hz) = f.cpu.tsc_hz {
        s.push_str(&format!(
            "tsc         {:.3} MHz, invariant: {}\n",
            hz / 1e6,
            f.cpu.tsc_invariant.map(|b| b.to_string()).unwrap_or_else(|| "unknown".into())
        ));
    }
    s.push_str(&format!("memory      {:.1} GiB\n", f.memory_bytes as f64 / (1u64 << 30) as f64));
    s.push_str(&format!("clocksource {}\nthp         {}\n", opt(&f.clocksource), opt(&f.thp)));
    s.push_str(&format!(
        "steal       {} ticks since boot\n",
        f.steal_ticks.map(|t| t.to_string()).unwrap_or_else(|| "unknown".into())
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_parsing() {
        let stat = "cpu  1 2 3 4 5 6 7 42 0 0\ncpu0 1 2 3 4 5 6 7 40 0 0\ncpu1 1 2 3 4 5 6 7 2 0 0\nintr 5\n";
        assert_eq!(parse_steal(stat, None), Some(42));
        assert_eq!(parse_steal(stat, Some(&[1])), Some(2));
        assert_eq!(parse_steal(stat, Some(&[0, 1])), Some(42));
        assert_eq!(parse_steal(stat, Some(&[7])), None);
    }

    #[test]
    fn boot_id_is_this_boots_uuid() {
        let id = boot_id().expect("a Linux test host has /proc/sys/kernel/random/boot_id");
        assert_eq!(id.len(), 36, "{id}");
        assert_eq!(id.matches('-').count(), 4, "{id}");
        assert_eq!(boot_id(), Some(id), "one boot, one id");
    }

    #[test]
    fn microcode_revision_or_none() {
        let host = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6248\n\
                    microcode\t: 0x5003604\ncpu MHz\t\t: 2500.000\n\nprocessor\t: 1\nmicrocode\t: 0x5003604\n";
        assert_eq!(microcode(host).as_deref(), Some("0x5003604"));
        // A guest kernel that shows no revision, and one that shows an empty field.
        assert_eq!(microcode("processor\t: 0\nmodel name\t: QEMU Virtual CPU version 2.5+\n"), None);
        assert_eq!(microcode("processor\t: 0\nmicrocode\t:\n"), None);
        // The key must be the whole key: "microcode_x" is not it.
        assert_eq!(microcode("microcode_x\t: 0x1\n"), None);
    }

    #[test]
    fn thp_bracket() {
        assert_eq!(bracketed("always [madvise] never").as_deref(), Some("madvise"));
        assert_eq!(bracketed("never"), None);
    }

    #[test]
    fn sysinfo_levels() {
        let text = "LPAR Number: 1\nLPAR Name: LP01\nVM00 Name: ZVM1\nVM00 Control Program: z/VM    7.2.0\nVM01 Control Program: KVM/Linux\n";
        let (levels, lpar) = parse_sysinfo(text);
        assert!(lpar);
        assert_eq!(levels, vec!["z/VM 7.2.0".to_string(), "KVM/Linux".to_string()]);
    }

    #[test]
    fn cpuid_thresholds() {
        assert_eq!(classify_cpuid(150.0, false).0, 0);
        assert_eq!(classify_cpuid(150.0, false).1, Confidence::High);
        assert_eq!(classify_cpuid(9000.0, true).0, 1);
        assert_eq!(classify_cpuid(9000.0, true).1, Confidence::Medium);
        assert_eq!(classify_cpuid(37_733.0, true).0, 2);
        assert_eq!(classify_cpuid(9000.0, false).1, Confidence::Low);
    }

    #[test]
    fn signatures() {
        assert_eq!(vendor_of_signature("KVMKVMKVM"), Some("KVM"));
        assert_eq!(vendor_of_signature("TCGTCGTCGTCG"), Some("QEMU TCG"));
        assert_eq!(vendor_of_dmi("QEMU", "Standard PC (Q35 + ICH9, 2009)"), Some("QEMU"));
        assert_eq!(vendor_of_dmi("Dell Inc.", "PowerEdge R640"), None);
    }
}
