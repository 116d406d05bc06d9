//! Clocks. `ticks_start`/`ticks_stop` bracket one operation: on x86_64 they read the TSC with
//! LFENCE fencing (RDTSC after LFENCE cannot start early; RDTSCP then LFENCE cannot finish
//! late), elsewhere they read CLOCK_MONOTONIC. `ns_per_tick` converts.

use std::sync::OnceLock;

/// CLOCK_MONOTONIC in nanoseconds.
pub fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_MONOTONIC_RAW in nanoseconds (not slewed by NTP; used to calibrate the TSC).
pub fn raw_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC_RAW)
}

fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid, writable timespec; clock_gettime only writes into it.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::{__rdtscp, _mm_lfence, _rdtsc};
    use std::sync::atomic::{AtomicU8, Ordering};

    #[inline(always)]
    pub fn ticks_start() -> u64 {
        // SAFETY: LFENCE and RDTSC exist on every x86_64 CPU and touch no memory.
        unsafe {
            _mm_lfence();
            let t = _rdtsc();
            _mm_lfence();
            t
        }
    }

    /// RDTSCP is missing on some emulated CPUs (QEMU's default qemu64 model): fall back to
    /// LFENCE; RDTSC, which also waits for earlier instructions to finish.
    static RDTSCP: AtomicU8 = AtomicU8::new(0);

    fn has_rdtscp() -> bool {
        match RDTSCP.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => {
                let ext = crate::cpuid::cpuid(0x8000_0000, 0).eax;
                let yes = ext >= 0x8000_0001 && crate::cpuid::cpuid(0x8000_0001, 0).edx & (1 << 27) != 0;
                RDTSCP.store(if yes { 1 } else { 2 }, Ordering::Relaxed);
                yes
            }
        }
    }

    #[inline(always)]
    pub fn ticks_stop() -> u64 {
        if !has_rdtscp() {
            return ticks_start();
        }
        let mut aux = 0u32;
        // SAFETY: RDTSCP (present, checked above) writes only `aux`, a valid local; LFENCE
        // touches no memory.
        unsafe {
            let t = __rdtscp(&mut aux);
            _mm_lfence();
            t
        }
    }

    pub fn ns_per_tick() -> f64 {
        match super::tsc_hz() {
            Some(hz) => 1e9 / hz,
            None => 1.0,
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    #[inline(always)]
    pub fn ticks_start() -> u64 {
        super::mono_ns()
    }

    #[inline(always)]
    pub fn ticks_stop() -> u64 {
        super::mono_ns()
    }

    pub fn ns_per_tick() -> f64 {
        1.0
    }
}

pub use imp::{ns_per_tick, ticks_start, ticks_stop};

/// Where the TSC frequency came from, with the value.
#[derive(Debug, Clone)]
pub struct TscFreq {
    pub hz: f64,
    pub source: String,
}

static TSC: OnceLock<Option<TscFreq>> = OnceLock::new();

/// TSC frequency in Hz (x86_64 only), found once and cached.
pub fn tsc_hz() -> Option<f64> {
    tsc_freq().map(|f| f.hz)
}

/// Use ``hz`` instead of finding the rate (a controller passes what this machine's `env`
/// found, so a run of tens of milliseconds does not spend 50 ms calibrating). First call wins.
pub fn set_tsc_hz(hz: f64) {
    let _ = TSC.set(Some(TscFreq { hz, source: "given by --tsc-hz".into() }));
}

pub fn tsc_freq() -> Option<TscFreq> {
    TSC.get_or_init(find_tsc_freq).clone()
}

#[cfg(target_arch = "x86_64")]
fn find_tsc_freq() -> Option<TscFreq> {
    use crate::cpuid::cpuid;
    // Hypervisor timing leaf (KVM with tsc freq exposed, VMware): EAX = TSC kHz.
    let hv_max = cpuid(0x4000_0000, 0).eax;
    if crate::cpuid::hypervisor_bit() && (0x4000_0010..0x4000_1000).contains(&hv_max) {
        let khz = cpuid(0x4000_0010, 0).eax;
        if khz > 0 {
            return Some(TscFreq { hz: khz as f64 * 1e3, source: "cpuid 0x40000010".into() });
        }
    }
    // Leaf 0x15: TSC = crystal * EBX / EAX, when the crystal frequency is enumerated.
    if cpuid(0, 0).eax >= 0x15 {
        let r = cpuid(0x15, 0);
        if r.eax != 0 && r.ebx != 0 && r.ecx != 0 {
            let hz = r.ecx as f64 * r.ebx as f64 / r.eax as f64;
            return Some(TscFreq { hz, source: "cpuid 0x15".into() });
        }
    }
    Some(TscFreq { hz: calibrate_tsc(), source: "calibrated against CLOCK_MONOTONIC_RAW over 50 ms".into() })
}

#[cfg(not(target_arch = "x86_64"))]
fn find_tsc_freq() -> Option<TscFreq> {
    None
}

/// TSC ticks per second of CLOCK_MONOTONIC_RAW over ~50 ms.
#[cfg(target_arch = "x86_64")]
pub fn calibrate_tsc() -> f64 {
    let (n0, t0) = (raw_ns(), ticks_start());
    std::thread::sleep(std::time::Duration::from_millis(50));
    let (t1, n1) = (ticks_stop(), raw_ns());
    (t1 - t0) as f64 * 1e9 / (n1 - n0) as f64
}

/// Median cost, in ticks, of an empty `ticks_start`/`ticks_stop` pair: what per-operation
/// probes subtract from every sample.
pub fn overhead_ticks() -> f64 {
    let mut v: Vec<f64> = (0..2000)
        .map(|_| {
            let a = ticks_start();
            let b = ticks_stop();
            b.wrapping_sub(a) as f64
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Current UTC time as RFC 3339 (second precision), without a date library.
pub fn utc_now_rfc3339() -> String {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    let secs = ts.tv_sec;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to (year, month, day); Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_719), (2026, 9, 23));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn ticks_advance() {
        let a = ticks_start();
        let b = ticks_stop();
        assert!(b >= a);
        assert!(ns_per_tick() > 0.0);
    }
}
