//! `cpu`: sysbench's cpu test. One event checks every c in 3..max_prime for primality by
//! trial division up to sqrt(c), in 64-bit integers with a double square root, as
//! sysbench's cpu_execute_event does, so events/s compares with `sysbench cpu`.

use super::{CpuPool, Defaults, Probe, Session, Spec, ALL_ARCHES};
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
pub fn event(max_prime: u64) -> u64 {
    let mut n = 0u64;
    for c in 3..max_prime {
        let t = (c as f64).sqrt();
        let mut l = 2u64;
        while (l as f64) <= t {
            if c % l == 0 {
                break;
            }
            l += 1;
        }
        if (l as f64) > t {
            n += 1;
        }
    }
    n
}

struct CpuSession {
    max_prime: u64,
    cpu: usize,
}

impl Probe for CpuProbe {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, String> {
        crate::affinity::pin(&[pool.first()])?;
        Ok(Box::new(CpuSession { max_prime: params.int("max_prime") as u64, cpu: pool.first() }))
    }
}

impl Session for CpuSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    fn iterate(&mut self) -> Result<f64, String> {
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
