//! `threads`: sysbench's threads test. `threads` workers take events in turn; event i
//! locks mutex i % `locks` and, `yields` times, yields the CPU while holding it
//! (lock, sched_yield, unlock), as sysbench's threads_execute_event does. Scheduler,
//! futex and (in a guest) vCPU preemption costs.

use super::{CpuPool, Ctl, Defaults, Probe, ProbeError, RunErr, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

pub struct Threads;
pub static THREADS: Threads = Threads;

static SPEC: Spec = Spec {
    name: "threads",
    summary: "sysbench threads: N threads, L mutexes, Y lock-yield-unlock per event",
    mechanism: "scheduler, futex wake-ups, vCPU preemption",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: Some("events/s"),
    params: &[
        ParamSpec {
            name: "threads",
            default: Default::Int(2),
            help: "worker threads",
            kind: Kind::Int { min: 1, max: 1024 },
        },
        ParamSpec {
            name: "yields",
            default: Default::Int(1000),
            help: "yields per event",
            kind: Kind::Int { min: 1, max: 1_000_000 },
        },
        ParamSpec {
            name: "locks",
            default: Default::Int(8),
            help: "mutexes shared by the threads",
            kind: Kind::Int { min: 1, max: 4096 },
        },
    ],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 200, duration_s: 0.25, warmup: 4 },
};

struct ThreadsSession {
    threads: usize,
    yields: u64,
    locks: Vec<Mutex<()>>,
    pin: Option<Vec<usize>>,
    cpus: Vec<usize>,
}

impl Probe for Threads {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        let threads = params.int("threads") as usize;
        let (pin, cpus) = if pool.requested {
            let used: Vec<usize> = (0..threads.min(pool.cpus.len())).map(|i| pool.cpus[i]).collect();
            (Some(pool.cpus.clone()), used)
        } else {
            (None, crate::affinity::allowed())
        };
        Ok(Box::new(ThreadsSession {
            threads,
            yields: params.int("yields") as u64,
            locks: (0..params.int("locks")).map(|_| Mutex::new(())).collect(),
            pin,
            cpus,
        }))
    }
}

impl ThreadsSession {
    /// Run `count` events over all workers; returns per-event ns in event order, the wall
    /// time, and whether the deadline stopped it.
    fn phase(&self, count: u64, duration_ns: Option<u64>) -> Result<(Vec<f64>, u64, bool), RunErr> {
        let next = AtomicU64::new(0);
        let stopped = AtomicBool::new(false);
        let start = mono_ns();
        let deadline = duration_ns.map(|d| start + d);
        let mut all: Vec<(u64, f64)> = Vec::new();
        let results = std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.threads)
                .map(|t| {
                    let (next, stopped) = (&next, &stopped);
                    s.spawn(move || -> Result<Vec<(u64, f64)>, ProbeError> {
                        if let Some(p) = &self.pin {
                            crate::affinity::pin(&[p[t % p.len()]])?;
                        }
                        let mut out = Vec::new();
                        loop {
                            if super::stop_requested() || stopped.load(Ordering::Relaxed) {
                                break;
                            }
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= count {
                                break;
                            }
                            let t0 = mono_ns();
                            if i >= 2 && deadline.is_some_and(|d| t0 >= d) {
                                stopped.store(true, Ordering::Relaxed);
                                break;
                            }
                            let m = &self.locks[(i % self.locks.len() as u64) as usize];
                            for _ in 0..self.yields {
                                let g = m.lock().unwrap_or_else(|e| e.into_inner());
                                // SAFETY: sched_yield has no arguments or memory effects.
                                unsafe { libc::sched_yield() };
                                drop(g);
                            }
                            out.push((i, (mono_ns() - t0) as f64));
                        }
                        Ok(out)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(Err(ProbeError::Panicked("worker")))).collect::<Vec<_>>()
        });
        let wall = mono_ns() - start;
        if super::stop_requested() {
            return Err(RunErr::Abort);
        }
        for r in results {
            all.extend(r?);
        }
        all.sort_by_key(|(i, _)| *i);
        Ok((all.into_iter().map(|(_, v)| v).collect(), wall, stopped.load(Ordering::Relaxed)))
    }
}

impl Session for ThreadsSession {
    fn cpus(&self) -> Vec<usize> {
        self.cpus.clone()
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        Err(ProbeError::WholePhases)
    }

    fn run(&mut self, ctl: &mut Ctl) -> Result<(), RunErr> {
        if ctl.warmup > 0 {
            let (warm, _, _) = self.phase(ctl.warmup, ctl.duration_ns)?;
            ctl.warm = warm;
        }
        let (values, wall, stopped) = self.phase(ctl.iterations, ctl.duration_ns)?;
        ctl.values = values;
        ctl.wall_ns = wall;
        ctl.stopped_by_duration = stopped;
        Ok(())
    }
}
