//! `pingpong`: the `wakeup` round trip with both sides spinning on shared words, so neither
//! CPU idles: the cost of cache-line transfer between (v)CPUs without any IPI.

use super::{net_ns, CpuPool, Defaults, Probe, Session, Spec, ALL_ARCHES};
use crate::clock::{ns_per_tick, overhead_ticks, ticks_start, ticks_stop};
use crate::output::Better;
use crate::params::Params;
use crate::probes::wakeup::Pair;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

pub struct Pingpong;
pub static PINGPONG: Pingpong = Pingpong;

static SPEC: Spec = Spec {
    name: "pingpong",
    summary: "round trip between two threads spinning on two CPUs (no idle, no IPI)",
    mechanism: "cross-CPU cache-line transfer; vCPU preemption shows as outliers",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: None,
    params: &[],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 20_000, duration_s: 0.2, warmup: 1000 },
};

struct PingpongSession {
    pair: Arc<Pair>,
    seq: u32,
    partner: Option<JoinHandle<()>>,
    cpus: Vec<usize>,
    overhead: f64,
    ns_per_tick: f64,
}

impl Probe for Pingpong {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, _params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, String> {
        let (a, b) = pool.two();
        if a == b {
            return Err("pingpong needs two CPUs (both sides spin): give --cpus with two CPUs".into());
        }
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
                    std::hint::spin_loop();
                    now = p.ping.load(Ordering::Acquire);
                }
                if p.quit.load(Ordering::Acquire) {
                    break;
                }
                seen = now;
                p.pong.store(seen, Ordering::Release);
            }
        });
        rx.recv().map_err(|_| "partner thread died".to_string())??;
        Ok(Box::new(PingpongSession {
            pair,
            seq: 0,
            partner: Some(partner),
            cpus: vec![a, b],
            overhead: overhead_ticks(),
            ns_per_tick: ns_per_tick(),
        }))
    }
}

impl Session for PingpongSession {
    fn cpus(&self) -> Vec<usize> {
        self.cpus.clone()
    }

    fn iterate(&mut self) -> Result<f64, String> {
        self.seq = self.seq.wrapping_add(1);
        let t0 = ticks_start();
        self.pair.ping.store(self.seq, Ordering::Release);
        while self.pair.pong.load(Ordering::Acquire) != self.seq {
            std::hint::spin_loop();
        }
        let t1 = ticks_stop();
        Ok(net_ns(t0, t1, self.overhead, self.ns_per_tick))
    }
}

impl Drop for PingpongSession {
    fn drop(&mut self) {
        self.pair.quit.store(true, Ordering::Release);
        self.pair.ping.fetch_add(1, Ordering::AcqRel);
        if let Some(h) = self.partner.take() {
            let _ = h.join();
        }
    }
}
