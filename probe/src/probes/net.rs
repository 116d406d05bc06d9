//! `tcp_rr`, `tcp_stream`, `tcp_maerts`: netperf's three TCP tests, built into the agent.
//!
//! By default the agent starts its own server thread on a free loopback port (`host` empty),
//! so one invocation measures the whole path; with `host` and `port` it connects to another
//! agent's `netserver` (guest to host, host to host). Nagle is off on both ends.
//!
//! - `tcp_rr`: one value is one transaction, `size` bytes there and `size` bytes back; trans/s.
//! - `tcp_stream`: one value is one `write` of `size` bytes to the server, which discards them;
//!   Mb/s over the measured part of the run.
//! - `tcp_maerts`: the server streams to us; one value is one `read_exact` of `size` bytes.
//!
//! The helpers at the bottom (loopback bring-up, connect, the parallel driver) are shared by
//! the `http`, `memcache` and `relay` clients.

use super::{stop_requested, CpuPool, Ctl, Defaults, Probe, ProbeError, RunErr, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Test {
    Rr,
    Stream,
    Maerts,
}

impl Test {
    fn name(self) -> &'static str {
        match self {
            Test::Rr => "TCP_RR",
            Test::Stream => "TCP_STREAM",
            Test::Maerts => "TCP_MAERTS",
        }
    }

    fn code(self) -> u8 {
        match self {
            Test::Rr => b'R',
            Test::Stream => b'S',
            Test::Maerts => b'M',
        }
    }

    fn from_code(c: u8) -> Option<Test> {
        match c {
            b'R' => Some(Test::Rr),
            b'S' => Some(Test::Stream),
            b'M' => Some(Test::Maerts),
            _ => None,
        }
    }
}

pub struct Net(Test);
pub static TCP_RR: Net = Net(Test::Rr);
pub static TCP_STREAM: Net = Net(Test::Stream);
pub static TCP_MAERTS: Net = Net(Test::Maerts);

const MECH: &str = "network path: virtual NIC (virtio-net/vhost), interrupts, IPIs and softirq";

const fn params(size: i64) -> [ParamSpec; 3] {
    [
        ParamSpec {
            name: "size",
            default: Default::Int(size),
            help: "bytes per request and per response (rr) or per send/receive (stream, maerts)",
            kind: Kind::Int { min: 1, max: 1 << 20 },
        },
        ParamSpec {
            name: "host",
            default: Default::Str(""),
            help: "server address of another agent's `netserver`; empty: a server thread of this agent on loopback",
            kind: Kind::Str,
        },
        ParamSpec {
            name: "port",
            default: Default::Int(0),
            help: "server port with `host`",
            kind: Kind::Int { min: 0, max: 65535 },
        },
    ]
}

static RR_PARAMS: [ParamSpec; 3] = params(1);
static BULK_PARAMS: [ParamSpec; 3] = params(16384);

static RR_SPEC: Spec = Spec {
    name: "tcp_rr",
    summary: "netperf TCP_RR: request/response round trips over TCP, Nagle off",
    mechanism: MECH,
    unit: "ns",
    better: Better::Lower,
    throughput_unit: Some("trans/s"),
    params: &RR_PARAMS,
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 100_000, duration_s: 1.0, warmup: 100 },
};

const fn bulk_spec(name: &'static str, summary: &'static str) -> Spec {
    Spec {
        name,
        summary,
        mechanism: MECH,
        unit: "ns",
        better: Better::Lower,
        throughput_unit: Some("Mb/s"),
        params: &BULK_PARAMS,
        needs_root: false,
        arches: ALL_ARCHES,
        defaults: Defaults { runs: 5, iterations: 10_000_000, duration_s: 1.0, warmup: 100 },
    }
}

static STREAM_SPEC: Spec = bulk_spec("tcp_stream", "netperf TCP_STREAM: bulk send to the server over TCP, Nagle off");
static MAERTS_SPEC: Spec =
    bulk_spec("tcp_maerts", "netperf TCP_MAERTS: bulk receive from the server over TCP, Nagle off");

impl Probe for Net {
    fn spec(&self) -> &'static Spec {
        match self.0 {
            Test::Rr => &RR_SPEC,
            Test::Stream => &STREAM_SPEC,
            Test::Maerts => &MAERTS_SPEC,
        }
    }

    fn validate(&self, params: &Params) -> Result<(), ProbeError> {
        if !params.str("host").is_empty() && params.int("port") == 0 {
            return Err(ProbeError::HostWithoutPort);
        }
        Ok(())
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        let size = params.int("size") as usize;
        // Like netperf, pin nothing unless asked: on a busy machine a pinned pair waits for
        // its two CPUs at every turn. With --cpus the client takes the first, the server the
        // second.
        let (cpu, server_cpu) = pool.two();
        let pinned = pool.requested;
        let addr = if params.str("host").is_empty() {
            let listener = listen_loopback()?;
            let addr = listener.local_addr()?;
            std::thread::spawn(move || {
                if let Ok((s, _)) = listener.accept() {
                    let _ = serve_conn(s, pinned.then_some(server_cpu));
                }
            });
            addr.to_string()
        } else {
            let host = params.str("host");
            let port = params.int("port");
            // An IPv6 address goes in brackets (an SSH host may be reached over IPv6).
            if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        };
        if pinned {
            crate::affinity::pin(&[cpu])?;
        }
        let mut stream = connect(&addr)?;
        // The test and size go first, so a `netserver` knows what to do.
        let mut hello = [0u8; 5];
        hello[0] = self.0.code();
        hello[1..].copy_from_slice(&(size as u32).to_le_bytes());
        stream.write_all(&hello).map_err(|e| ProbeError::io(format!("{}: {addr}", self.0.name()), e))?;
        let cpus = if pinned { vec![cpu] } else { pool.cpus.clone() };
        // With its own server thread the path is recorded; another agent's is not ours.
        let path = if params.str("host").is_empty() { pool.path() } else { None };
        Ok(Box::new(NetSession { test: self.0, stream, buf: vec![0x5a; size], cpus, path }))
    }
}

struct NetSession {
    test: Test,
    stream: TcpStream,
    buf: Vec<u8>,
    cpus: Vec<usize>,
    path: Option<(usize, usize)>,
}

impl Session for NetSession {
    fn cpus(&self) -> Vec<usize> {
        self.cpus.clone()
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let t0 = mono_ns();
        let r = match self.test {
            Test::Rr => self.stream.write_all(&self.buf).and_then(|_| self.stream.read_exact(&mut self.buf)),
            Test::Stream => self.stream.write_all(&self.buf),
            Test::Maerts => self.stream.read_exact(&mut self.buf),
        };
        let t1 = mono_ns();
        r.map_err(|e| ProbeError::io(self.test.name(), e))?;
        Ok((t1 - t0) as f64)
    }

    fn throughput(&self, n: usize, wall_s: f64, _values: &[f64]) -> Option<f64> {
        if wall_s <= 0.0 {
            return None;
        }
        match self.test {
            Test::Rr => Some(n as f64 / wall_s),
            _ => Some((n * self.buf.len()) as f64 * 8.0 / wall_s / 1e6),
        }
    }

    fn extra(&self, _values: &[f64]) -> std::collections::BTreeMap<String, f64> {
        super::path_extra(self.path)
    }
}

impl Drop for NetSession {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// Serve one connection of a `tcp_*` client: read its 5-byte hello, then echo (RR),
/// discard (STREAM) or send (MAERTS) until the client goes away.
fn serve_conn(mut s: TcpStream, pinned: Option<usize>) -> Result<(), ProbeError> {
    if let Some(cpu) = pinned {
        crate::affinity::pin(&[cpu])?;
    }
    s.set_nodelay(true)?;
    let mut hello = [0u8; 5];
    s.read_exact(&mut hello)?;
    let test = Test::from_code(hello[0]).ok_or(ProbeError::UnknownTest)?;
    let size = u32::from_le_bytes([hello[1], hello[2], hello[3], hello[4]]) as usize;
    let mut buf = vec![0xa5u8; size.clamp(1, 1 << 20)];
    match test {
        Test::Rr => {
            while s.read_exact(&mut buf).is_ok() {
                if s.write_all(&buf).is_err() {
                    break;
                }
            }
        }
        Test::Stream => {
            let mut sink = vec![0u8; 1 << 16];
            while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
        }
        Test::Maerts => while s.write_all(&buf).is_ok() {},
    }
    Ok(())
}

/// `vmtax-probe netserver`: accept `tcp_*` clients of other agents, one thread each, until
/// killed. Prints the bound address on stdout first.
pub fn netserver(bind: &str, clients: u64) -> Result<(), ProbeError> {
    ensure_loopback();
    let listener = TcpListener::bind(bind).map_err(|e| ProbeError::io(format!("bind {bind}"), e))?;
    // The bound address on stdout tells whoever started it (the controller, through a
    // guest's agent) that clients may connect now.
    println!("{}", listener.local_addr()?);
    let mut served = Vec::new();
    for conn in listener.incoming().flatten() {
        let handle = std::thread::spawn(move || serve_conn(conn, None));
        if clients > 0 {
            served.push(handle);
            if served.len() as u64 >= clients {
                break;
            }
        }
    }
    for handle in served {
        let _ = handle.join();
    }
    Ok(())
}

/// Bring the loopback interface up if it is down (a guest whose init is the agent has
/// nobody else to do it). Best effort: without CAP_NET_ADMIN the connect fails later with
/// a clear error.
pub fn ensure_loopback() {
    // SAFETY: a throwaway datagram socket used only for the SIOC[GS]IFFLAGS ioctls on "lo";
    // the ifreq is zeroed plain data with the name written inside its bounds.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return;
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        ifr.ifr_name[0] = b'l' as libc::c_char;
        ifr.ifr_name[1] = b'o' as libc::c_char;
        if libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut ifr) == 0 && ifr.ifr_ifru.ifru_flags & libc::IFF_UP as i16 == 0
        {
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as i16;
            libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &ifr);
        }
        libc::close(fd);
    }
}

/// A server the agent starts itself (where nobody else can: a guest whose init is the
/// agent), killed and reaped when dropped.
pub struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `cmd` (split on spaces, no shell), pinned to `cpu` when given (every thread it
/// starts inherits that), and wait until it accepts on `addr`; an error quotes the last
/// line it wrote on stderr.
pub fn spawn_server(cmd: &str, addr: &str, cpu: Option<usize>) -> Result<Child, ProbeError> {
    ensure_loopback();
    let argv: Vec<&str> = cmd.split_whitespace().collect();
    let prog = *argv.first().ok_or(ProbeError::NoServerProgram)?;
    let mut command = std::process::Command::new(prog);
    if let Some(c) = cpu {
        crate::affinity::pin_before_exec(&mut command, c)?;
    }
    let child = command
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| ProbeError::io(format!("cannot start {prog}"), e))?;
    let mut child = Child(child);
    let deadline = mono_ns() + 20_000_000_000;
    while mono_ns() < deadline {
        if TcpStream::connect(addr).is_ok() {
            return Ok(child);
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = child.0.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("(no output)");
            return Err(ProbeError::ServerDied { prog: prog.to_string(), status, last: last.trim().to_string() });
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Err(ProbeError::ServerSilent { prog: prog.to_string(), addr: addr.to_string() })
}

/// A listener on a free loopback port.
pub fn listen_loopback() -> Result<TcpListener, ProbeError> {
    ensure_loopback();
    TcpListener::bind("127.0.0.1:0").map_err(|e| ProbeError::io("bind 127.0.0.1:0", e))
}

/// Connect with Nagle off.
pub fn connect(addr: &str) -> Result<TcpStream, ProbeError> {
    if addr.starts_with("127.") || addr.starts_with("localhost") {
        ensure_loopback();
    }
    let s = TcpStream::connect(addr).map_err(|e| ProbeError::io(format!("connect {addr}"), e))?;
    s.set_nodelay(true).map_err(|e| ProbeError::io(addr, e))?;
    Ok(s)
}

/// One client thread's warm-up values and (end time, latency) pairs.
type ThreadResult = Result<(Vec<f64>, Vec<(u64, f64)>), RunErr>;

/// Drive a run over several connections at once, one thread each: `op` does one request
/// on one connection. Every request's latency is kept; the values are ordered by the time
/// each request ended, and the warm-up (split over the connections) comes first.
pub fn drive_parallel<C: Send>(
    ctl: &mut Ctl,
    conns: &mut [C],
    op: impl Fn(&mut C) -> Result<(), ProbeError> + Sync,
) -> Result<(), RunErr> {
    let n = conns.len().max(1) as u64;
    let warmup = ctl.warmup;
    let issued = AtomicU64::new(0);
    let iterations = ctl.iterations;
    let duration = ctl.duration_ns;
    let start = Mutex::new(0u64);
    let barrier = std::sync::Barrier::new(conns.len());
    let results: Vec<ThreadResult> = std::thread::scope(|sc| {
        let handles: Vec<_> = conns
            .iter_mut()
            .enumerate()
            .map(|(i, c)| {
                let (op, issued, start, barrier) = (&op, &issued, &start, &barrier);
                // The warm-up is split over the connections, the first ones take the remainder.
                let warm_each = warmup / n + u64::from((i as u64) < warmup % n);
                sc.spawn(move || -> ThreadResult {
                    let mut warm = Vec::new();
                    let mut err = None;
                    for _ in 0..warm_each {
                        if stop_requested() {
                            break;
                        }
                        let t0 = mono_ns();
                        if let Err(e) = op(c) {
                            err = Some(e);
                            break;
                        }
                        warm.push((mono_ns() - t0) as f64);
                    }
                    // Every connection starts measuring together, even one that failed (it
                    // then leaves at once), so nobody waits on the barrier for ever.
                    if barrier.wait().is_leader() {
                        *start.lock().unwrap() = mono_ns();
                    }
                    let _ = barrier.wait();
                    if let Some(e) = err {
                        return Err(RunErr::Fail(e));
                    }
                    let t_start = *start.lock().unwrap();
                    let deadline = duration.map(|d| t_start + d);
                    let mut vals = Vec::new();
                    loop {
                        if stop_requested() {
                            return Err(RunErr::Abort);
                        }
                        let k = issued.fetch_add(1, Ordering::Relaxed);
                        if k >= iterations {
                            break;
                        }
                        let t0 = mono_ns();
                        if k >= 2 && deadline.is_some_and(|d| t0 >= d) {
                            break;
                        }
                        op(c).map_err(RunErr::Fail)?;
                        let t1 = mono_ns();
                        vals.push((t1, (t1 - t0) as f64));
                    }
                    Ok((warm, vals))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(RunErr::Fail(ProbeError::Panicked("client thread")))))
            .collect()
    });
    let mut all = Vec::new();
    for r in results {
        let (warm, vals) = r?;
        ctl.warm.extend(warm);
        all.extend(vals);
    }
    all.sort_by_key(|&(t, _)| t);
    let t_start = *start.lock().unwrap();
    ctl.wall_ns = all.last().map_or(0, |&(t, _)| t.saturating_sub(t_start));
    ctl.stopped_by_duration = (all.len() as u64) < iterations;
    ctl.values.extend(all.into_iter().map(|(_, v)| v));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rr_stream_and_maerts_move_data_over_loopback() {
        for p in [&TCP_RR, &TCP_STREAM, &TCP_MAERTS] {
            let params = crate::params::resolve(p.spec().name, p.spec().params, &["size=64".into()]).unwrap();
            let pool = CpuPool { cpus: crate::affinity::allowed(), requested: false };
            let mut s = p.setup(&params, &pool).unwrap();
            let mut ctl = Ctl::new(2, 50, Some(5.0));
            s.run(&mut ctl).unwrap();
            assert_eq!(ctl.values.len(), 50);
            assert!(s.throughput(50, 0.01, &ctl.values).unwrap() > 0.0);
        }
    }

    #[test]
    fn parallel_driver_keeps_every_request() {
        let mut conns = vec![0u64; 3];
        let mut ctl = Ctl::new(7, 300, Some(10.0));
        drive_parallel(&mut ctl, &mut conns, |c| {
            *c += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(ctl.values.len(), 300);
        assert_eq!(ctl.warm.len(), 7);
        assert_eq!(conns.iter().sum::<u64>(), 307);
    }
}
