//! Probes: one file each, each a `Probe` (its declaration and setup) returning a `Session`
//! (the thing that measures one iteration). The generic driver in `Ctl` runs iterations,
//! warm-up, and the iterations-or-duration stop rule, so probes stay small.

use crate::clock::mono_ns;
use crate::output::{Better, ProbeInfo};
use crate::params::{ParamSpec, Params};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};

pub mod cpu;
#[cfg(target_arch = "x86_64")]
pub mod cpuid;
pub mod ctxswitch;
pub mod exec;
pub mod http;
pub mod io;
pub mod memcache;
pub mod memory;
pub mod net;
pub mod noise;
pub mod pagefault;
pub mod pingpong;
pub mod relay;
mod roundtrip;
pub mod syscall;
pub mod threads;
pub mod timer;
pub mod wakeup;
pub mod write;

pub const ALL_ARCHES: &[&str] = &["x86_64", "aarch64", "s390x"];

/// Default run shape of a probe: short, so that a quick suite of every probe stays short.
#[derive(Debug, Clone, Copy)]
pub struct Defaults {
    pub runs: u32,
    pub iterations: u64,
    pub duration_s: f64,
    pub warmup: u64,
}

pub struct Spec {
    pub name: &'static str,
    pub summary: &'static str,
    pub mechanism: &'static str,
    pub unit: &'static str,
    pub better: Better,
    pub throughput_unit: Option<&'static str>,
    pub params: &'static [ParamSpec],
    pub needs_root: bool,
    pub arches: &'static [&'static str],
    pub defaults: Defaults,
}

impl Spec {
    pub fn info(&self) -> ProbeInfo {
        ProbeInfo {
            name: self.name.into(),
            summary: self.summary.into(),
            mechanism: self.mechanism.into(),
            unit: self.unit.into(),
            better: self.better,
            throughput_unit: self.throughput_unit.map(String::from),
            params: self.params.iter().map(|p| p.info()).collect(),
            needs_root: self.needs_root,
            arches: self.arches.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// CPUs a probe may use: the `--cpus` list, else the allowed CPUs starting with the current one.
#[derive(Debug, Clone)]
pub struct CpuPool {
    pub cpus: Vec<usize>,
    pub requested: bool,
}

impl CpuPool {
    pub fn first(&self) -> usize {
        self.cpus[0]
    }

    /// Two CPUs, distinct when the pool has two.
    pub fn two(&self) -> (usize, usize) {
        (self.cpus[0], *self.cpus.get(1).unwrap_or(&self.cpus[0]))
    }
}

/// Why a run stopped early.
#[derive(Debug)]
pub enum RunErr {
    /// A signal or the --timeout asked every run to stop.
    Abort,
    Fail(String),
}

impl From<String> for RunErr {
    fn from(s: String) -> Self {
        RunErr::Fail(s)
    }
}

/// 0 = running, 1 = interrupted by a signal, 2 = --timeout reached.
pub static STOP: AtomicU8 = AtomicU8::new(0);

pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed) != 0
}

/// One measuring session of a probe (set up once, then run once per run).
pub trait Session {
    /// CPUs the session actually uses.
    fn cpus(&self) -> Vec<usize>;
    /// Measure one iteration, in the probe's unit.
    fn iterate(&mut self) -> Result<f64, String>;
    /// Run one run; the default drives `iterate`.
    fn run(&mut self, ctl: &mut Ctl) -> Result<(), RunErr> {
        ctl.drive(|| self.iterate())
    }
    /// Throughput in the probe's throughput unit (only asked when it declares one); by
    /// default operations per second of the measured part of the run.
    fn throughput(&self, n: usize, wall_s: f64, _values: &[f64]) -> Option<f64> {
        (wall_s > 0.0).then(|| n as f64 / wall_s)
    }
    /// Probe-specific figures for the summary (e.g. ns equivalents of cycles).
    fn extra(&self, _values: &[f64]) -> BTreeMap<String, f64> {
        BTreeMap::new()
    }
}

pub trait Probe: Sync {
    fn spec(&self) -> &'static Spec;
    /// Rules that one parameter's range cannot say (a power of two, one parameter against
    /// another), checked before anything runs so that a bad value is a usage error.
    fn validate(&self, _params: &Params) -> Result<(), String> {
        Ok(())
    }
    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, String>;
}

/// Iteration control of one run.
pub struct Ctl {
    pub warmup: u64,
    pub iterations: u64,
    pub duration_ns: Option<u64>,
    pub warm: Vec<f64>,
    pub values: Vec<f64>,
    pub wall_ns: u64,
    pub stopped_by_duration: bool,
}

impl Ctl {
    pub fn new(warmup: u64, iterations: u64, duration_s: Option<f64>) -> Ctl {
        Ctl {
            warmup,
            iterations,
            duration_ns: duration_s.map(|d| (d * 1e9) as u64),
            warm: Vec::with_capacity(warmup as usize),
            values: Vec::with_capacity(iterations.min(1 << 20) as usize),
            wall_ns: 0,
            stopped_by_duration: false,
        }
    }

    /// Run warm-up then measured iterations of `f`. The run stops at `iterations` or when
    /// `duration` has elapsed (after at least two measured values, so a run always has a
    /// standard deviation). The clock is read at a stride that doubles while checks come
    /// less than 1 ms apart, so cheap iterations pay almost nothing for the check.
    pub fn drive(&mut self, mut f: impl FnMut() -> Result<f64, String>) -> Result<(), RunErr> {
        let t0 = mono_ns();
        let warm_deadline = self.duration_ns.map(|d| t0 + d);
        let mut stride = Stride::default();
        let mut i = 0u64;
        while i < self.warmup {
            if stop_requested() {
                return Err(RunErr::Abort);
            }
            if stride.due(i) {
                let now = mono_ns();
                stride.adapt(now);
                if warm_deadline.is_some_and(|d| now >= d) {
                    break;
                }
            }
            self.warm.push(f()?);
            i += 1;
        }
        let start = mono_ns();
        let deadline = self.duration_ns.map(|d| start + d);
        let mut stride = Stride::default();
        let mut i = 0u64;
        while i < self.iterations {
            if stop_requested() {
                return Err(RunErr::Abort);
            }
            if i >= 2 && stride.due(i) {
                let now = mono_ns();
                stride.adapt(now);
                if deadline.is_some_and(|d| now >= d) {
                    self.stopped_by_duration = true;
                    break;
                }
            }
            self.values.push(f()?);
            i += 1;
        }
        self.wall_ns = mono_ns() - start;
        Ok(())
    }
}

struct Stride {
    every: u64,
    last: u64,
}

impl Default for Stride {
    fn default() -> Self {
        Stride { every: 1, last: mono_ns() }
    }
}

impl Stride {
    fn due(&self, i: u64) -> bool {
        i.is_multiple_of(self.every)
    }

    fn adapt(&mut self, now: u64) {
        if now - self.last < 1_000_000 && self.every < 1024 {
            self.every *= 2;
        }
        self.last = now;
    }
}

/// Every probe compiled for this architecture, in listing order.
pub fn all() -> Vec<&'static dyn Probe> {
    vec![
        #[cfg(target_arch = "x86_64")]
        &cpuid::CPUID,
        &syscall::SYSCALL,
        &write::WRITE,
        &timer::TIMER,
        &wakeup::WAKEUP,
        &pingpong::PINGPONG,
        &ctxswitch::CTXSWITCH,
        &pagefault::PAGEFAULT,
        &cpu::CPU,
        &threads::THREADS,
        &memory::MEMORY,
        &io::IO,
        &net::TCP_RR,
        &net::TCP_STREAM,
        &net::TCP_MAERTS,
        &relay::RELAY,
        &http::HTTP,
        &memcache::MEMCACHE,
        &exec::EXEC,
    ]
}

pub fn find(name: &str) -> Option<&'static dyn Probe> {
    all().into_iter().find(|p| p.spec().name == name)
}

/// Per-op helper shared by syscall-like probes: elapsed ticks minus the measured overhead
/// of an empty start/stop pair, in ns, never below zero.
#[inline(always)]
pub fn net_ns(start: u64, stop: u64, overhead_ticks: f64, ns_per_tick: f64) -> f64 {
    ((stop.wrapping_sub(start) as f64 - overhead_ticks) * ns_per_tick).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drive_stops_at_iterations_or_duration() {
        let mut ctl = Ctl::new(3, 10, Some(10.0));
        ctl.drive(|| Ok(1.0)).unwrap();
        assert_eq!((ctl.warm.len(), ctl.values.len(), ctl.stopped_by_duration), (3, 10, false));

        let mut ctl = Ctl::new(0, 1_000_000, Some(0.02));
        ctl.drive(|| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            Ok(1.0)
        })
        .unwrap();
        assert!(ctl.stopped_by_duration);
        assert!(ctl.values.len() >= 2 && ctl.values.len() < 1000);
    }

    #[test]
    fn every_probe_declares_unique_name_and_defaults() {
        let names: std::collections::BTreeSet<_> = all().iter().map(|p| p.spec().name).collect();
        assert_eq!(names.len(), all().len());
        for p in all() {
            let s = p.spec();
            assert!(s.defaults.iterations >= 2 && s.defaults.runs >= 1, "{}", s.name);
            crate::params::resolve(s.name, s.params, &[]).unwrap();
        }
    }
}
