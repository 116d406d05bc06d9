//! `http`: an HTTP/1.1 keep-alive GET client, one connection per thread, timing every
//! request from the first byte sent to the last byte of the body read. The controller
//! starts the server (lighttpd) and passes its port; the agent is only the client, so the
//! same client runs at every level. In a guest, where nobody else can start it, `server`
//! has the agent start it for the session and stop it after.

use super::net::{connect, drive_parallel};
use super::{CpuPool, Ctl, Defaults, Probe, ProbeError, RunErr, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

pub struct Http;
pub static HTTP: Http = Http;

static PARAMS: [ParamSpec; 5] = [
    ParamSpec { name: "host", default: Default::Str("127.0.0.1"), help: "server address", kind: Kind::Str },
    ParamSpec { name: "port", default: Default::Int(80), help: "server port", kind: Kind::Int { min: 1, max: 65535 } },
    ParamSpec { name: "path", default: Default::Str("/"), help: "path to GET", kind: Kind::Str },
    ParamSpec {
        name: "connections",
        default: Default::Int(1),
        help: "concurrent keep-alive connections (one thread each)",
        kind: Kind::Int { min: 1, max: 256 },
    },
    ParamSpec {
        name: "server",
        default: Default::Str(""),
        help: "web server command line the agent starts first and stops after (no shell); empty: one is running",
        kind: Kind::Str,
    },
];

static SPEC: Spec = Spec {
    name: "http",
    summary: "HTTP/1.1 keep-alive GET latency of every request against a server on host:port",
    mechanism: "network path and server wake-ups: virtual NIC, interrupts, IPIs, scheduler",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: Some("req/s"),
    params: &PARAMS,
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 10_000, duration_s: 1.0, warmup: 20 },
};

pub struct Conn {
    addr: String,
    request: Vec<u8>,
    reader: Option<BufReader<TcpStream>>,
    line: String,
    body: Vec<u8>,
}

impl Conn {
    fn new(addr: &str, host: &str, path: &str) -> Conn {
        let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: vmtax-probe\r\n\r\n").into_bytes();
        Conn { addr: addr.to_string(), request, reader: None, line: String::new(), body: Vec::new() }
    }

    /// One GET; reconnects once when the server closed a kept-alive connection.
    pub fn get(&mut self) -> Result<(), ProbeError> {
        match self.try_get() {
            Ok(()) => Ok(()),
            Err(_) if self.reader.is_none() => self.try_get().map_err(|e| {
                e.context(format!(
                    "GET {}",
                    String::from_utf8_lossy(&self.request[4..]).split(' ').next().unwrap_or("")
                ))
            }),
            Err(e) => Err(e),
        }
    }

    fn try_get(&mut self) -> Result<(), ProbeError> {
        if self.reader.is_none() {
            self.reader = Some(BufReader::with_capacity(1 << 16, connect(&self.addr)?));
        }
        let r = self.reader.as_mut().expect("connected");
        if r.get_mut().write_all(&self.request).is_err() {
            self.reader = None;
            return Err(ProbeError::Closed);
        }
        self.line.clear();
        if r.read_line(&mut self.line)? == 0 {
            self.reader = None;
            return Err(ProbeError::Closed);
        }
        let status = self.line.split(' ').nth(1).unwrap_or("").to_string();
        if status != "200" {
            return Err(ProbeError::HttpStatus(self.line.trim_end().to_string()));
        }
        let mut length: Option<usize> = None;
        let mut close = false;
        loop {
            self.line.clear();
            if r.read_line(&mut self.line)? == 0 {
                return Err(ProbeError::ClosedInHeaders);
            }
            let l = self.line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                if k == "content-length" {
                    length = v.trim().parse().ok();
                } else if k == "connection" && v.trim().eq_ignore_ascii_case("close") {
                    close = true;
                }
            }
        }
        let n = length.ok_or(ProbeError::NoContentLength)?;
        self.body.resize(n, 0);
        r.read_exact(&mut self.body)?;
        if close {
            self.reader = None;
        }
        Ok(())
    }
}

impl Probe for Http {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        let host = params.str("host");
        let addr = format!("{host}:{}", params.int("port"));
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
        let mut conns: Vec<Conn> =
            (0..params.int("connections")).map(|_| Conn::new(&addr, host, params.str("path"))).collect();
        for c in conns.iter_mut() {
            c.get()?;
        }
        let path = pool.path().filter(|_| server.is_some());
        let cpus = pool.path().map_or_else(|| pool.cpus.clone(), |(c, _)| vec![c]);
        Ok(Box::new(HttpSession { conns, cpus, path, _server: server }))
    }
}

struct HttpSession {
    conns: Vec<Conn>,
    cpus: Vec<usize>,
    /// The pinned client's and server's CPUs (`CpuPool::path`), when the agent started the server.
    path: Option<(usize, usize)>,
    // Dropped after the connections (fields drop in order): the server goes last.
    _server: Option<super::net::Child>,
}

impl Session for HttpSession {
    fn cpus(&self) -> Vec<usize> {
        self.cpus.clone()
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let t0 = mono_ns();
        self.conns[0].get()?;
        Ok((mono_ns() - t0) as f64)
    }

    fn run(&mut self, ctl: &mut Ctl) -> Result<(), RunErr> {
        if self.conns.len() == 1 {
            return ctl.drive(|| self.iterate());
        }
        drive_parallel(ctl, &mut self.conns, Conn::get)
    }

    fn extra(&self, _values: &[f64]) -> std::collections::BTreeMap<String, f64> {
        super::path_extra(self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn gets_from_a_keep_alive_server_and_reconnects_after_close() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let mut r = BufReader::new(s);
                // Two requests per connection, then close: the client must reconnect.
                for i in 0..2 {
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let conn = if i == 1 { "Connection: close\r\n" } else { "" };
                    let _ = r.get_mut().write_all(
                        format!("HTTP/1.1 200 OK\r\n{conn}Content-Length: 44\r\n\r\n{}", "x".repeat(44)).as_bytes(),
                    );
                }
            }
        });
        let params = crate::params::resolve("http", &PARAMS, &[format!("port={port}")]).unwrap();
        let pool = CpuPool { cpus: vec![0], requested: false };
        let mut s = HTTP.setup(&params, &pool).unwrap();
        let mut ctl = Ctl::new(0, 9, Some(5.0));
        s.run(&mut ctl).unwrap();
        assert_eq!(ctl.values.len(), 9);
    }
}
