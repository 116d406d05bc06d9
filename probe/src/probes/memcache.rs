//! `memcache`: a memcached load generator (text protocol), as memtier_benchmark drives it:
//! a get:set mix over a key space filled before the first run, `connections` connections
//! with one thread each, every request's latency kept. The controller starts memcached and
//! passes its port.

use super::net::{connect, drive_parallel};
use super::{CpuPool, Ctl, Defaults, Probe, ProbeError, RunErr, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

pub struct Memcache;
pub static MEMCACHE: Memcache = Memcache;

static PARAMS: [ParamSpec; 7] = [
    ParamSpec { name: "host", default: Default::Str("127.0.0.1"), help: "server address", kind: Kind::Str },
    ParamSpec {
        name: "port",
        default: Default::Int(11211),
        help: "server port",
        kind: Kind::Int { min: 1, max: 65535 },
    },
    ParamSpec {
        name: "gets_per_set",
        default: Default::Int(10),
        help: "gets per set (memtier's default ratio is 1:10)",
        kind: Kind::Int { min: 0, max: 1000 },
    },
    ParamSpec {
        name: "keys",
        default: Default::Int(1000),
        help: "key space",
        kind: Kind::Int { min: 1, max: 10_000_000 },
    },
    ParamSpec {
        name: "value_size",
        default: Default::Int(32),
        help: "bytes per value (memtier's default)",
        kind: Kind::Int { min: 1, max: 1 << 20 },
    },
    ParamSpec {
        name: "connections",
        default: Default::Int(1),
        help: "concurrent connections (one thread each)",
        kind: Kind::Int { min: 1, max: 256 },
    },
    ParamSpec {
        name: "server",
        default: Default::Str(""),
        help: "memcached command line the agent starts first and stops after (no shell); empty: one is running",
        kind: Kind::Str,
    },
];

static SPEC: Spec = Spec {
    name: "memcache",
    summary: "memcached get/set latency of every request (text protocol) against host:port",
    mechanism: "network path and server wake-ups: virtual NIC, interrupts, IPIs, scheduler",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: Some("ops/s"),
    params: &PARAMS,
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 20_000, duration_s: 1.0, warmup: 50 },
};

struct Conn {
    r: BufReader<TcpStream>,
    line: String,
    value: Vec<u8>,
    keys: u64,
    ratio: u64,
    seq: u64,
    state: u64,
}

impl Conn {
    fn key(&mut self) -> u64 {
        // xorshift64: a cheap uniform pick over the key space
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state % self.keys
    }

    fn set(&mut self, key: u64) -> Result<(), ProbeError> {
        let mut req = format!("set k{key} 0 0 {}\r\n", self.value.len()).into_bytes();
        req.extend_from_slice(&self.value);
        req.extend_from_slice(b"\r\n");
        self.r.get_mut().write_all(&req).map_err(|e| ProbeError::io("set", e))?;
        self.read_line()?;
        if self.line != "STORED\r\n" {
            return Err(ProbeError::UnexpectedReply { what: "set", line: self.line.trim_end().to_string() });
        }
        Ok(())
    }

    fn get(&mut self, key: u64) -> Result<(), ProbeError> {
        self.r.get_mut().write_all(format!("get k{key}\r\n").as_bytes()).map_err(|e| ProbeError::io("get", e))?;
        loop {
            self.read_line()?;
            if self.line == "END\r\n" {
                return Ok(());
            }
            let len: usize = match self.line.strip_prefix("VALUE ") {
                Some(rest) => {
                    rest.split_whitespace().nth(2).and_then(|x| x.parse().ok()).ok_or(ProbeError::BadValueLine)?
                }
                None => {
                    return Err(ProbeError::UnexpectedReply { what: "get", line: self.line.trim_end().to_string() })
                }
            };
            let mut data = vec![0u8; len + 2];
            self.r.read_exact(&mut data).map_err(|e| ProbeError::io("get", e))?;
        }
    }

    fn read_line(&mut self) -> Result<(), ProbeError> {
        self.line.clear();
        match self.r.read_line(&mut self.line) {
            Ok(0) => Err(ProbeError::MemcachedClosed),
            Ok(_) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// One request of the mix: a set every `ratio + 1` requests, gets otherwise.
    fn request(&mut self) -> Result<(), ProbeError> {
        self.seq += 1;
        let key = self.key();
        if self.seq.is_multiple_of(self.ratio + 1) {
            self.set(key)
        } else {
            self.get(key)
        }
    }
}

impl Probe for Memcache {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        let addr = format!("{}:{}", params.str("host"), params.int("port"));
        let server = match params.str("server") {
            "" => None,
            cmd => Some(super::net::spawn_server(cmd, &addr, pool.path().map(|(_, s)| s))?),
        };
        // With --cpus the client takes the first CPU and the server it starts the second
        // (as net's): the summary records both, and the client's connection threads
        // inherit the pinning.
        if let Some((client, _)) = pool.path() {
            crate::affinity::pin(&[client])?;
        }
        let mut conns = Vec::new();
        for i in 0..params.int("connections") as u64 {
            conns.push(Conn {
                r: BufReader::new(connect(&addr)?),
                line: String::new(),
                value: vec![b'v'; params.int("value_size") as usize],
                keys: params.int("keys") as u64,
                ratio: params.int("gets_per_set") as u64,
                seq: 0,
                state: 0x9e37_79b9_7f4a_7c15 ^ (i + 1),
            });
        }
        // Fill the key space so that gets hit, as memtier's --key-pattern runs do after a load.
        for key in 0..params.int("keys") as u64 {
            conns[0].set(key).map_err(|e| e.context(&addr))?;
        }
        let path = pool.path().filter(|_| server.is_some());
        let cpus = pool.path().map_or_else(|| pool.cpus.clone(), |(c, _)| vec![c]);
        Ok(Box::new(McSession { conns, cpus, path, _server: server }))
    }
}

struct McSession {
    conns: Vec<Conn>,
    cpus: Vec<usize>,
    /// The pinned client's and server's CPUs (`CpuPool::path`), when the agent started the server.
    path: Option<(usize, usize)>,
    // Dropped after the connections (fields drop in order): the server goes last.
    _server: Option<super::net::Child>,
}

impl Session for McSession {
    fn cpus(&self) -> Vec<usize> {
        self.cpus.clone()
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let t0 = mono_ns();
        self.conns[0].request()?;
        Ok((mono_ns() - t0) as f64)
    }

    fn run(&mut self, ctl: &mut Ctl) -> Result<(), RunErr> {
        if self.conns.len() == 1 {
            return ctl.drive(|| self.iterate());
        }
        drive_parallel(ctl, &mut self.conns, Conn::request)
    }

    fn extra(&self, _values: &[f64]) -> std::collections::BTreeMap<String, f64> {
        super::path_extra(self.path)
    }
}
