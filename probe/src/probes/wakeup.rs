//! `wakeup`: wake a thread pinned on another CPU that sleeps in a futex (so that CPU is
//! idle), and wait in a futex for its answer: the round trip of two cross-CPU wake-ups.
//! In a guest each wake-up is an IPI to a halted vCPU: a VM exit to send it, and the
//! target must be scheduled and have the interrupt injected.

use super::{net_ns, CpuPool, Defaults, Probe, Session, Spec, ALL_ARCHES};
use crate::clock::{ns_per_tick, overhead_ticks, ticks_start, ticks_stop};
use crate::output::Better;
use crate::params::Params;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

pub struct Wakeup;
pub static WAKEUP: Wakeup = Wakeup;

static SPEC: Spec = Spec {
    name: "wakeup",
    summary: "futex wake-up round trip to a thread sleeping on another CPU",
    mechanism: "IPI to an idle (halted) vCPU and interrupt injection",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: None,
    params: &[],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 5000, duration_s: 0.3, warmup: 100 },
};

#[derive(Default)]
pub struct Pair {
    pub ping: AtomicU32,
    pub pong: AtomicU32,
    pub quit: AtomicBool,
}

pub fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: the futex word is a live AtomicU32; FUTEX_WAIT only reads it and sleeps while it
    // equals `expected`. No timeout pointer.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: the futex word is a live AtomicU32; FUTEX_WAKE does not access memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1);
    }
}

struct WakeupSession {
    pair: Arc<Pair>,
    seq: u32,
    partner: Option<JoinHandle<()>>,
    cpus: Vec<usize>,
    overhead: f64,
    ns_per_tick: f64,
}

impl Probe for Wakeup {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, _params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, String> {
        let (a, b) = pool.two();
        crate::affinity::pin(&[a])?;
        let pair = Arc::new(Pair::default());
        let p = pair.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let partner = std::thread::spawn(move || {
            let _ = tx.send(crate::affinity::pin(&[b]));
            let mut seen = 0u32;
            loop {
                let mut now = p.ping.load(Ordering::Acquire);
                while now == seen {
                    futex_wait(&p.ping, seen);
                    now = p.ping.load(Ordering::Acquire);
                }
                if p.quit.load(Ordering::Acquire) {
                    break;
                }
                seen = now;
                p.pong.store(seen, Ordering::Release);
                futex_wake(&p.pong);
            }
        });
        rx.recv().map_err(|_| "partner thread died".to_string())??;
        let cpus = if a == b { vec![a] } else { vec![a, b] };
        Ok(Box::new(WakeupSession {
            pair,
            seq: 0,
            partner: Some(partner),
            cpus,
            overhead: overhead_ticks(),
            ns_per_tick: ns_per_tick(),
        }))
    }
}

impl Session for WakeupSession {
    fn cpus(&self) -> Vec<usize> {
        self.cpus.clone()
    }

    fn iterate(&mut self) -> Result<f64, String> {
        let prev = self.seq;
        self.seq = self.seq.wrapping_add(1);
        let t0 = ticks_start();
        self.pair.ping.store(self.seq, Ordering::Release);
        futex_wake(&self.pair.ping);
        while self.pair.pong.load(Ordering::Acquire) != self.seq {
            futex_wait(&self.pair.pong, prev);
        }
        let t1 = ticks_stop();
        Ok(net_ns(t0, t1, self.overhead, self.ns_per_tick))
    }
}

impl Drop for WakeupSession {
    fn drop(&mut self) {
        self.pair.quit.store(true, Ordering::Release);
        self.pair.ping.fetch_add(1, Ordering::AcqRel);
        futex_wake(&self.pair.ping);
        if let Some(h) = self.partner.take() {
            let _ = h.join();
        }
    }
}
