//! `spin`: a fixed chain of dependent adds, timed chunk by chunk. The work causes no exit, so
//! a chunk takes longer than the others only when something else took its CPU: at a VM
//! level, the exits that come with time (the guest kernel's timer interrupts and the like),
//! each costing what an exit costs at that level. The median chunk is the work alone (most
//! chunks hold no exit); the mean over the median, minus one, is the time those exits take
//! per unit of work. This calibrates the model's time-driven term at the level itself
//! (docs/model.md, "The time-driven term").

use super::{net_ns, CpuPool, Defaults, Probe, ProbeError, Session, Spec, ALL_ARCHES};
use crate::clock::{ns_per_tick, overhead_ticks, ticks_start, ticks_stop};
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};

pub struct Spin;
pub static SPIN: Spin = Spin;

static SPEC: Spec = Spec {
    name: "spin",
    summary: "exit-free work timed in chunks: the time that exits coming with time take",
    mechanism: "time-driven exits (timer interrupts) landing in exit-free work",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: None,
    params: &[ParamSpec {
        name: "adds",
        default: Default::Int(4096),
        help: "dependent adds per timed chunk (short chunks keep most of them free of any exit)",
        kind: Kind::Int { min: 64, max: 100_000_000 },
    }],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 1_000_000, duration_s: 0.3, warmup: 100 },
};

struct SpinSession {
    adds: u64,
    overhead: f64,
    ns_per_tick: f64,
    seed: u64,
    cpu: usize,
}

impl Probe for Spin {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        crate::affinity::pin(&[pool.first()])?;
        Ok(Box::new(SpinSession {
            adds: params.int("adds") as u64,
            overhead: overhead_ticks(),
            ns_per_tick: ns_per_tick(),
            seed: 1,
            cpu: pool.first(),
        }))
    }
}

impl Session for SpinSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    #[inline(never)]
    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let a = ticks_start();
        let mut x = self.seed;
        for _ in 0..self.adds {
            // black_box keeps each add a dependent step the compiler cannot fold away.
            x = std::hint::black_box(x).wrapping_add(3);
        }
        let b = ticks_stop();
        self.seed = x;
        Ok(net_ns(a, b, self.overhead, self.ns_per_tick))
    }
}
