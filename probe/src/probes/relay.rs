//! `relay`: study D's relay ring. `relays` forwarders and one master form a ring of TCP
//! connections (Nagle off) on loopback; the master sends a 4-byte integer, every forwarder
//! reads it and sends it on, and the master times its return. One value is one round trip
//! of the ring, so runs x iterations give the study's mesh (periodic lines, cross-run
//! spikes). `interval_us` spaces the master's sends as the study's "every t seconds" did.

use super::net::{connect, listen_loopback};
use super::{CpuPool, Defaults, Probe, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};

pub struct Relay;
pub static RELAY: Relay = Relay;

static PARAMS: [ParamSpec; 2] = [
    ParamSpec {
        name: "relays",
        default: Default::Int(1),
        help: "forwarders in the ring besides the master",
        kind: Kind::Int { min: 1, max: 64 },
    },
    ParamSpec {
        name: "interval_us",
        default: Default::Int(0),
        help: "microseconds from one send of the master to the next (0: back to back)",
        kind: Kind::Int { min: 0, max: 10_000_000 },
    },
];

static SPEC: Spec = Spec {
    name: "relay",
    summary: "study D relay ring: round trip of a 4-byte message through N TCP forwarders",
    mechanism: "network stack wake-ups: loopback TCP, scheduler, interrupts, timers",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: None,
    params: &PARAMS,
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 10_000, duration_s: 1.0, warmup: 100 },
};

impl Probe for Relay {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, String> {
        let n = params.int("relays") as usize;
        // Node 0 is the master, 1..=n the forwarders; node i sends to node i+1 (mod n+1).
        let listeners = (0..=n).map(|_| listen_loopback()).collect::<Result<Vec<_>, _>>()?;
        let addrs: Vec<String> = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.to_string()).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        let mut listeners = listeners.into_iter();
        let master_in = listeners.next().expect("master listener");
        for (i, l) in listeners.enumerate() {
            let next = addrs[(i + 2) % (n + 1)].clone();
            std::thread::spawn(move || {
                let Ok((mut up, _)) = l.accept() else { return };
                let _ = up.set_nodelay(true);
                let Ok(mut down) = connect(&next) else { return };
                let mut msg = [0u8; 4];
                while up.read_exact(&mut msg).is_ok() {
                    if down.write_all(&msg).is_err() {
                        break;
                    }
                }
                let _ = down.shutdown(Shutdown::Both);
            });
        }
        let out = connect(&addrs[1])?;
        let (back, _) = master_in.accept().map_err(|e| format!("relay ring: {e}"))?;
        back.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Box::new(RelaySession {
            out,
            back,
            seq: 0,
            interval_ns: params.int("interval_us") as u64 * 1000,
            next_send: 0,
            cpus: pool.cpus.clone(),
        }))
    }
}

struct RelaySession {
    out: TcpStream,
    back: TcpStream,
    seq: u32,
    interval_ns: u64,
    next_send: u64,
    cpus: Vec<usize>,
}

impl Session for RelaySession {
    fn cpus(&self) -> Vec<usize> {
        self.cpus.clone()
    }

    fn iterate(&mut self) -> Result<f64, String> {
        if self.interval_ns > 0 {
            let now = mono_ns();
            if self.next_send > now {
                std::thread::sleep(std::time::Duration::from_nanos(self.next_send - now));
            }
            self.next_send = self.next_send.max(now) + self.interval_ns;
        }
        self.seq = self.seq.wrapping_add(1);
        let mut msg = self.seq.to_le_bytes();
        let t0 = mono_ns();
        self.out.write_all(&msg).map_err(|e| format!("relay send: {e}"))?;
        self.back.read_exact(&mut msg).map_err(|e| format!("relay receive: {e}"))?;
        let t1 = mono_ns();
        if u32::from_le_bytes(msg) != self.seq {
            return Err(format!("relay ring returned message {} for {}", u32::from_le_bytes(msg), self.seq));
        }
        Ok((t1 - t0) as f64)
    }
}

impl Drop for RelaySession {
    fn drop(&mut self) {
        let _ = self.out.shutdown(Shutdown::Both);
        let _ = self.back.shutdown(Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::Ctl;

    #[test]
    fn a_ring_of_three_returns_every_message() {
        let params = crate::params::resolve("relay", &PARAMS, &["relays=3".into()]).unwrap();
        let pool = CpuPool { cpus: vec![0], requested: false };
        let mut s = RELAY.setup(&params, &pool).unwrap();
        let mut ctl = Ctl::new(5, 200, Some(5.0));
        s.run(&mut ctl).unwrap();
        assert_eq!(ctl.values.len(), 200);
        assert!(ctl.values.iter().all(|v| *v > 0.0));
    }
}
