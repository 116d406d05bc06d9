//! `relay`: study D's relay ring. `relays` forwarders and one master form a ring of TCP
//! connections (Nagle off) on loopback; the master sends a 4-byte integer, every forwarder
//! reads it and sends it on, and the master times its return. One value is one round trip
//! of the ring, so runs x iterations give the study's mesh (periodic lines, cross-run
//! spikes). `interval_us` spaces the master's sends as the study's "every t seconds" did.
//!
//! A ring can span machines: `away` lists forwarders that run elsewhere (`vmtax-probe
//! relay-forward`, started by the controller), which take the odd places of the ring (1, 3,
//! ...) while this agent's nodes take the even ones, so every hop crosses between the two.
//! `listen` then fixes where this agent's nodes listen (master first), so that the away
//! forwarders know where to send: in a guest, ports its user network forwards.

use super::net::{connect, ensure_loopback, listen_loopback};
use super::{CpuPool, Defaults, Probe, ProbeError, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// Why this agent's forwarders dropped their hop: a ring that breaks off says so in the
/// master's error, not only that its message never came back.
type Broken = Arc<Mutex<Vec<String>>>;

pub struct Relay;
pub static RELAY: Relay = Relay;

static PARAMS: [ParamSpec; 4] = [
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
    ParamSpec {
        name: "away",
        default: Default::Str(""),
        help: "comma-separated addresses of forwarders run elsewhere: the ring's places 1, 3, ...",
        kind: Kind::Str,
    },
    ParamSpec {
        name: "listen",
        default: Default::Str(""),
        help: "comma-separated addresses this agent's nodes listen on, master first (default: free loopback ports)",
        kind: Kind::Str,
    },
];

fn list(params: &Params, name: &str) -> Vec<String> {
    params.str(name).split(',').map(str::trim).filter(|a| !a.is_empty()).map(String::from).collect()
}

/// Node `i`'s place in a ring of `n + 1`: elsewhere (an `away` forwarder) or here.
fn is_away(i: usize, spread: bool) -> bool {
    spread && i % 2 == 1
}

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

    fn validate(&self, params: &Params) -> Result<(), ProbeError> {
        let n = params.int("relays") as usize;
        let away = list(params, "away");
        let here = (0..=n).filter(|i| !is_away(*i, !away.is_empty())).count();
        if !away.is_empty() && away.len() != n.div_ceil(2) {
            return Err(ProbeError::AwayCount { need: n.div_ceil(2), relays: n });
        }
        let listen = list(params, "listen");
        if !listen.is_empty() && listen.len() != here {
            return Err(ProbeError::ListenCount(here));
        }
        Ok(())
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        let n = params.int("relays") as usize;
        let away = list(params, "away");
        let spread = !away.is_empty();
        let mut binds = list(params, "listen").into_iter();
        // Node 0 is the master, 1..=n the forwarders; node i sends to node i+1 (mod n+1).
        let mut listeners: Vec<Option<TcpListener>> = Vec::new();
        let mut addrs: Vec<String> = Vec::new();
        for i in 0..=n {
            if is_away(i, spread) {
                listeners.push(None);
                addrs.push(away[i / 2].clone());
                continue;
            }
            let l = match binds.next() {
                Some(b) => {
                    ensure_loopback();
                    TcpListener::bind(&b).map_err(|e| ProbeError::io(format!("bind {b}"), e))?
                }
                None => listen_loopback()?,
            };
            let mut addr = l.local_addr()?;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            addrs.push(addr.to_string());
            listeners.push(Some(l));
        }
        let mut listeners = listeners.into_iter();
        let master_in = listeners.next().flatten().expect("master listener");
        let broken = Broken::default();
        for (i, l) in listeners.enumerate() {
            let Some(l) = l else { continue };
            let next = addrs[(i + 2) % (n + 1)].clone();
            let broken = Arc::clone(&broken);
            std::thread::spawn(move || {
                let place = i + 1;
                let why = match l.accept() {
                    Err(e) => format!("accept: {e}"),
                    Ok((up, _)) => {
                        let _ = up.set_nodelay(true);
                        match connect(&next) {
                            Ok(down) => match pump(up, down) {
                                Ok(()) => return,
                                Err(e) => e,
                            },
                            Err(e) => e.to_string(),
                        }
                    }
                };
                broken.lock().unwrap_or_else(|p| p.into_inner()).push(format!("forwarder {place}: {why}"));
            });
        }
        let out = connect(&addrs[1])?;
        let (back, _) = master_in.accept().map_err(|e| ProbeError::io("relay ring", e))?;
        back.set_nodelay(true)?;
        Ok(Box::new(RelaySession {
            out,
            back,
            broken,
            seq: 0,
            interval_ns: params.int("interval_us") as u64 * 1000,
            next_send: 0,
            cpus: pool.cpus.clone(),
        }))
    }
}

/// Pass every message from `up` to `down` until `up` closes (the ring's end), or until
/// sending on fails: then why, and `down` is closed either way.
fn pump(mut up: TcpStream, mut down: TcpStream) -> Result<(), String> {
    let mut msg = [0u8; 4];
    let mut ended = Ok(());
    while up.read_exact(&mut msg).is_ok() {
        if let Err(e) = down.write_all(&msg) {
            ended = Err(format!("send on: {e}"));
            break;
        }
    }
    let _ = down.shutdown(Shutdown::Both);
    ended
}

/// `vmtax-probe relay-forward`: one forwarder of a ring that spans machines, for as many
/// rings (runs) as come, until killed. Prints its bound address when it listens.
pub fn forward(bind: &str, next: &str) -> Result<(), ProbeError> {
    ensure_loopback();
    let listener = TcpListener::bind(bind).map_err(|e| ProbeError::io(format!("bind {bind}"), e))?;
    println!("{}", listener.local_addr()?);
    for up in listener.incoming().flatten() {
        let next = next.to_string();
        std::thread::spawn(move || {
            let _ = up.set_nodelay(true);
            // On stderr (the controller's log of this process): the upstream node sees only
            // its connection close.
            match connect(&next) {
                Ok(down) => {
                    if let Err(e) = pump(up, down) {
                        eprintln!("vmtax-probe: relay-forward: {e}");
                    }
                }
                Err(e) => eprintln!("vmtax-probe: relay-forward: {e}"),
            }
        });
    }
    Ok(())
}

struct RelaySession {
    out: TcpStream,
    back: TcpStream,
    broken: Broken,
    seq: u32,
    interval_ns: u64,
    next_send: u64,
    cpus: Vec<usize>,
}

impl Session for RelaySession {
    fn cpus(&self) -> Vec<usize> {
        self.cpus.clone()
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
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
        self.out.write_all(&msg).map_err(|e| ProbeError::io(self.what("relay send"), e))?;
        self.back.read_exact(&mut msg).map_err(|e| ProbeError::io(self.what("relay receive"), e))?;
        let t1 = mono_ns();
        if u32::from_le_bytes(msg) != self.seq {
            return Err(ProbeError::RingOrder { got: u32::from_le_bytes(msg), sent: self.seq });
        }
        Ok((t1 - t0) as f64)
    }
}

impl RelaySession {
    /// What broke, with why this agent's forwarders dropped their hops when they did.
    fn what(&self, step: &str) -> String {
        let broken = self.broken.lock().unwrap_or_else(|p| p.into_inner());
        if broken.is_empty() {
            step.to_string()
        } else {
            format!("{step} ({})", broken.join("; "))
        }
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

    /// Ports free now that no bind to port 0 and no outgoing connection will take before
    /// the ring binds them: the kernel hands those out from 32768 up, and the other tests
    /// of this binary make many while this one runs.
    fn unused_ports_below_the_ephemeral_range(n: usize) -> Vec<u16> {
        let start = 20_000 + (std::process::id() % 5_000) as u16;
        (start..32_000).filter(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok()).take(n).collect()
    }

    #[test]
    fn a_forwarder_that_cannot_reach_the_next_place_is_named_in_the_masters_error() {
        // Place 1 (away) passes on to this agent's forwarder at place 2, whose next place
        // (3, away) has nothing listening. Place 3's own hop to the master is a connection
        // held open for 2 s and then closed, as a forwarder that gives up would.
        let ports = unused_ports_below_the_ephemeral_range(2);
        let (p0, p2) = (ports[0], ports[1]);
        let one = TcpListener::bind("127.0.0.1:0").unwrap();
        let at_one = one.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (up, _) = one.accept().unwrap();
            let _ = pump(up, connect(&format!("127.0.0.1:{p2}")).unwrap());
        });
        let nobody = TcpListener::bind("127.0.0.1:0").unwrap();
        let at_three = nobody.local_addr().unwrap().to_string();
        drop(nobody);
        std::thread::spawn(move || {
            let hop = loop {
                match TcpStream::connect(("127.0.0.1", p0)) {
                    Ok(s) => break s,
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
                }
            };
            std::thread::sleep(std::time::Duration::from_secs(2));
            drop(hop);
        });
        let params = crate::params::resolve(
            "relay",
            &PARAMS,
            &["relays=3".into(), format!("away={at_one},{at_three}"), format!("listen=127.0.0.1:{p0},127.0.0.1:{p2}")],
        )
        .unwrap();
        let pool = CpuPool { cpus: vec![0], requested: false };
        let mut s = RELAY.setup(&params, &pool).unwrap();
        let err = s.run(&mut Ctl::new(0, 10, Some(10.0))).unwrap_err().to_string();
        assert!(err.starts_with("relay receive (forwarder 2: connect "), "{err}");
        assert!(err.contains(&at_three), "{err}");
    }

    #[test]
    fn a_ring_spans_forwarders_elsewhere_at_its_odd_places() {
        // Two "away" forwarders (threads here, processes or machines in use) at places 1
        // and 3; this agent's master (0) and forwarder (2) listen where they are told.
        let ports = unused_ports_below_the_ephemeral_range(2);
        let mut away = Vec::new();
        for next in [ports[1], ports[0]] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            away.push(l.local_addr().unwrap().to_string());
            std::thread::spawn(move || {
                let (up, _) = l.accept().unwrap();
                let _ = pump(up, connect(&format!("127.0.0.1:{next}")).unwrap());
            });
        }
        let params = crate::params::resolve(
            "relay",
            &PARAMS,
            &[
                "relays=3".into(),
                format!("away={}", away.join(",")),
                format!("listen=127.0.0.1:{},0.0.0.0:{}", ports[0], ports[1]),
            ],
        )
        .unwrap();
        RELAY.validate(&params).unwrap();
        let pool = CpuPool { cpus: vec![0], requested: false };
        let mut s = RELAY.setup(&params, &pool).unwrap();
        let mut ctl = Ctl::new(2, 100, Some(5.0));
        s.run(&mut ctl).unwrap();
        assert_eq!(ctl.values.len(), 100);
        let short = crate::params::resolve("relay", &PARAMS, &["relays=3".into(), "away=127.0.0.1:1".into()]).unwrap();
        assert!(RELAY.validate(&short).unwrap_err().to_string().contains("needs 2 addresses"));
        let listen =
            crate::params::resolve("relay", &PARAMS, &["relays=2".into(), "listen=127.0.0.1:1".into()]).unwrap();
        assert!(RELAY.validate(&listen).unwrap_err().to_string().contains("needs 3 addresses"));
    }
}
