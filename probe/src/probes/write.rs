//! `write`: write a short line to /dev/null or a pipe, either one write() per line
//! ("direct") or appended to a user buffer of `buffer` bytes that is written out when full
//! ("buffered", like stdio's puts): then every buffer/len-th iteration carries the syscall,
//! a periodic pattern the artifact detector must find.

use super::{net_ns, CpuPool, Defaults, Probe, ProbeError, Session, Spec, ALL_ARCHES};
use crate::clock::{ns_per_tick, overhead_ticks, ticks_start, ticks_stop};
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};

pub struct WriteProbe;
pub static WRITE: WriteProbe = WriteProbe;

static SPEC: Spec = Spec {
    name: "write",
    summary: "write a short line to /dev/null or a pipe, direct or buffered like puts",
    mechanism: "user/kernel transition with a copy (buffered: a flush every buffer/len lines)",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: None,
    params: &[
        ParamSpec {
            name: "target",
            default: Default::Str("null"),
            help: "where lines go: /dev/null or a pipe drained by a thread",
            kind: Kind::Choice(&["null", "pipe"]),
        },
        ParamSpec {
            name: "mode",
            default: Default::Str("direct"),
            help: "direct: one write() per line; buffered: flush when `buffer` bytes are full",
            kind: Kind::Choice(&["direct", "buffered"]),
        },
        ParamSpec {
            name: "len",
            default: Default::Int(32),
            help: "line length in bytes",
            kind: Kind::Int { min: 1, max: 4096 },
        },
        ParamSpec {
            name: "buffer",
            default: Default::Int(4096),
            help: "buffer size in bytes for mode=buffered",
            kind: Kind::Int { min: 1, max: 1 << 20 },
        },
    ],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 20_000, duration_s: 0.2, warmup: 1000 },
};

struct WriteSession {
    out: File,
    line: Vec<u8>,
    buf: Vec<u8>,
    cap: usize,
    buffered: bool,
    overhead: f64,
    ns_per_tick: f64,
    cpu: usize,
    _drain: Option<std::thread::JoinHandle<()>>,
}

impl Probe for WriteProbe {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn validate(&self, params: &Params) -> Result<(), ProbeError> {
        let (len, cap) = (params.int("len"), params.int("buffer"));
        if params.str("mode") == "buffered" && cap < len {
            return Err(ProbeError::BufferTooSmall { cap, len });
        }
        Ok(())
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        crate::affinity::pin(&[pool.first()])?;
        let len = params.int("len") as usize;
        let cap = params.int("buffer") as usize;
        let buffered = params.str("mode") == "buffered";
        let (out, drain) = if params.str("target") == "pipe" {
            let mut fds = [0i32; 2];
            // SAFETY: fds is a valid array of two ints for pipe2 to fill.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
                return Err(ProbeError::os("pipe"));
            }
            // SAFETY: both fds were just created and are owned by nobody else.
            let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
            let mut reader = File::from(r);
            let h = std::thread::spawn(move || {
                let mut sink = vec![0u8; 65536];
                while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
            });
            (File::from(w), Some(h))
        } else {
            (
                std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/null")
                    .map_err(|e| ProbeError::io("/dev/null", e))?,
                None,
            )
        };
        let mut line = vec![b'x'; len];
        line[len - 1] = b'\n';
        Ok(Box::new(WriteSession {
            out,
            line,
            buf: Vec::with_capacity(cap),
            cap,
            buffered,
            overhead: overhead_ticks(),
            ns_per_tick: ns_per_tick(),
            cpu: pool.first(),
            _drain: drain,
        }))
    }
}

impl Session for WriteSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let a = ticks_start();
        if self.buffered {
            if self.buf.len() + self.line.len() > self.cap {
                self.out.write_all(&self.buf).map_err(|e| ProbeError::io("write", e))?;
                self.buf.clear();
            }
            self.buf.extend_from_slice(&self.line);
        } else {
            self.out.write_all(&self.line).map_err(|e| ProbeError::io("write", e))?;
        }
        let b = ticks_stop();
        Ok(net_ns(a, b, self.overhead, self.ns_per_tick))
    }

    fn extra(&self, _values: &[f64]) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        if self.buffered {
            m.insert("flush_period".into(), (self.cap / self.line.len()) as f64);
        }
        m
    }
}
