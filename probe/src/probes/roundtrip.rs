//! The cross-CPU round trip shared by `wakeup` and `pingpong`: this thread bumps `ping`, a
//! partner pinned on another CPU answers on `pong`. The two probes differ only in how each
//! side waits: in a futex (so the waiting CPU idles and every wake-up is an IPI) or spinning
//! (no idle, no IPI: only cache-line transfer).

use super::{net_ns, ProbeError, Session};
use crate::clock::{ns_per_tick, overhead_ticks, ticks_start, ticks_stop};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

#[derive(Debug, Clone, Copy)]
pub enum Wait {
    /// Sleep in FUTEX_WAIT; the other side wakes us with FUTEX_WAKE.
    Futex,
    /// Spin on the word; nothing to wake.
    Spin,
}

impl Wait {
    fn idle(self, word: &AtomicU32, expected: u32) {
        match self {
            Wait::Futex => futex_wait(word, expected),
            Wait::Spin => std::hint::spin_loop(),
        }
    }

    fn notify(self, word: &AtomicU32) {
        if let Wait::Futex = self {
            futex_wake(word);
        }
    }
}

#[derive(Default)]
struct Pair {
    ping: AtomicU32,
    pong: AtomicU32,
    quit: AtomicBool,
}

fn futex_wait(word: &AtomicU32, expected: u32) {
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

fn futex_wake(word: &AtomicU32) {
    // SAFETY: the futex word is a live AtomicU32; FUTEX_WAKE does not access memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1);
    }
}

pub struct RoundTrip {
    pair: Arc<Pair>,
    seq: u32,
    partner: Option<JoinHandle<()>>,
    cpus: Vec<usize>,
    wait: Wait,
    overhead: f64,
    ns_per_tick: f64,
}

impl RoundTrip {
    /// Pin this thread on `a`, start the partner pinned on `b`, and wait until it runs.
    pub fn start(a: usize, b: usize, wait: Wait) -> Result<Self, ProbeError> {
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
                    wait.idle(&p.ping, seen);
                    now = p.ping.load(Ordering::Acquire);
                }
                if p.quit.load(Ordering::Acquire) {
                    break;
                }
                seen = now;
                p.pong.store(seen, Ordering::Release);
                wait.notify(&p.pong);
            }
        });
        rx.recv().map_err(|_| ProbeError::PartnerDied)??;
        let cpus = if a == b { vec![a] } else { vec![a, b] };
        Ok(RoundTrip {
            pair,
            seq: 0,
            partner: Some(partner),
            cpus,
            wait,
            overhead: overhead_ticks(),
            ns_per_tick: ns_per_tick(),
        })
    }
}

impl Session for RoundTrip {
    fn cpus(&self) -> Vec<usize> {
        self.cpus.clone()
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let prev = self.seq;
        self.seq = self.seq.wrapping_add(1);
        let t0 = ticks_start();
        self.pair.ping.store(self.seq, Ordering::Release);
        self.wait.notify(&self.pair.ping);
        while self.pair.pong.load(Ordering::Acquire) != self.seq {
            self.wait.idle(&self.pair.pong, prev);
        }
        let t1 = ticks_stop();
        Ok(net_ns(t0, t1, self.overhead, self.ns_per_tick))
    }
}

impl Drop for RoundTrip {
    fn drop(&mut self) {
        self.pair.quit.store(true, Ordering::Release);
        self.pair.ping.fetch_add(1, Ordering::AcqRel);
        self.wait.notify(&self.pair.ping);
        if let Some(h) = self.partner.take() {
            let _ = h.join();
        }
    }
}
