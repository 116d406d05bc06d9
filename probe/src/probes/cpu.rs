//! `cpu`: sysbench's cpu test. One event checks every c in 3..max_prime for primality by
//! trial division up to sqrt(c), in 64-bit integers with a double square root, as
//! sysbench's cpu_execute_event does, so events/s compares with `sysbench cpu`.

use super::{CpuPool, Defaults, Probe, ProbeError, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};

pub struct CpuProbe;
pub static CPU: CpuProbe = CpuProbe;

static SPEC: Spec = Spec {
    name: "cpu",
    summary: "sysbench cpu: trial division up to max_prime",
    mechanism: "none (pure user-mode compute)",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: Some("events/s"),
    params: &[ParamSpec {
        name: "max_prime",
        default: Default::Int(20000),
        help: "upper bound of the primes tested per event",
        kind: Kind::Int { min: 3, max: 100_000_000 },
    }],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 500, duration_s: 0.3, warmup: 5 },
};

/// One sysbench cpu event: the number of primes below `max_prime`.
///
/// sysbench's counters are unsigned 64-bit, but every value here is below 2^63, so signed
/// integers give the same results and let the integer-to-double conversion in the loop test
/// be one CVTSI2SD, as GCC emits for sysbench (an unsigned conversion is a longer sequence
/// on the loop's critical path).
pub fn event(max_prime: u64) -> u64 {
    let max = max_prime.min(i64::MAX as u64) as i64;
    let mut n = 0u64;
    for c in 3..max {
        let t = (c as f64).sqrt();
        let mut l = 2i64;
        // The first trial (l = 2) is a parity test, as GCC peels it out of sysbench's loop;
        // the result is the same as dividing.
        if (l as f64) <= t && c & 1 != 0 {
            l = 3;
            while (l as f64) <= t {
                if rem_u64(c as u64, l as u64) == 0 {
                    break;
                }
                l += 1;
            }
        }
        if (l as f64) > t {
            n += 1;
        }
    }
    n
}

/// `a % b` with a 64-bit DIV, as GCC compiles sysbench's `unsigned long long` remainder.
/// LLVM would branch to a 32-bit DIV when both operands fit (faster on many x86 cores),
/// which made events/s ~10% higher than sysbench's on the same CPU.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rem_u64(a: u64, b: u64) -> u64 {
    let rem: u64;
    // SAFETY: DIV only reads and writes registers; callers pass b >= 2, so it cannot fault
    // (and the quotient of a 0:a dividend always fits in 64 bits).
    unsafe {
        std::arch::asm!(
            "div {b}",
            b = in(reg) b,
            inout("rax") a => _,
            inout("rdx") 0u64 => rem,
            options(pure, nomem, nostack),
        );
    }
    rem
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn rem_u64(a: u64, b: u64) -> u64 {
    a % b
}

struct CpuSession {
    max_prime: u64,
    cpu: usize,
}

impl Probe for CpuProbe {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        crate::affinity::pin(&[pool.first()])?;
        Ok(Box::new(CpuSession { max_prime: params.int("max_prime") as u64, cpu: pool.first() }))
    }
}

impl Session for CpuSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let t0 = mono_ns();
        std::hint::black_box(event(std::hint::black_box(self.max_prime)));
        Ok((mono_ns() - t0) as f64)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_odd_primes() {
        // sysbench starts at 3 and tests c < max_prime: primes 3,5,7 below 10.
        assert_eq!(super::event(10), 3);
        assert_eq!(super::event(20000), 2261);
    }
}
