//! `io`: small O_DIRECT reads (or writes followed by fdatasync) at random aligned offsets
//! of a temporary file. Bypassing the page cache makes every operation a device request:
//! in a guest, a virtqueue notification (an exit) and a completion interrupt.

use super::{CpuPool, Defaults, Probe, ProbeError, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::os::fd::{AsRawFd, OwnedFd};

pub struct Io;
pub static IO: Io = Io;

static SPEC: Spec = Spec {
    name: "io",
    summary: "small O_DIRECT reads, or writes + fdatasync, on a temporary file",
    mechanism: "device notification (virtqueue kick) and completion interrupt",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: Some("IOPS"),
    params: &[
        ParamSpec {
            name: "dir",
            default: Default::Str(""),
            help: "directory for the temporary file (empty: $TMPDIR, else /tmp); must support O_DIRECT",
            kind: Kind::Str,
        },
        ParamSpec {
            name: "op",
            default: Default::Str("read"),
            help: "operation",
            kind: Kind::Choice(&["read", "write"]),
        },
        ParamSpec {
            name: "block_size",
            default: Default::Int(4096),
            help: "bytes per operation (a multiple of 512)",
            kind: Kind::Int { min: 512, max: 1 << 20 },
        },
        ParamSpec {
            name: "file_mb",
            default: Default::Int(16),
            help: "file size in MiB",
            kind: Kind::Int { min: 1, max: 1 << 16 },
        },
    ],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 2000, duration_s: 0.4, warmup: 20 },
};

struct IoSession {
    fd: OwnedFd,
    buf: *mut u8,
    layout: std::alloc::Layout,
    block: usize,
    blocks: u64,
    write: bool,
    rng: u64,
    cpu: usize,
}

impl Probe for Io {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn validate(&self, params: &Params) -> Result<(), ProbeError> {
        let block = params.int("block_size");
        if block % 512 != 0 {
            return Err(ProbeError::BlockSize(block));
        }
        if params.int("file_mb") * 1024 * 1024 < block {
            return Err(ProbeError::FileTooSmall);
        }
        Ok(())
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        crate::affinity::pin(&[pool.first()])?;
        let block = params.int("block_size") as usize;
        let size = params.int("file_mb") as usize * 1024 * 1024;
        let dir = match params.str("dir") {
            "" => std::env::var("TMPDIR").ok().filter(|d| !d.is_empty()).unwrap_or_else(|| "/tmp".into()),
            d => d.to_string(),
        };
        let path = format!("{}/vmtax-io-{}", dir.trim_end_matches('/'), std::process::id());
        // Unlinked at once, so that no kill (not even SIGKILL while it is being filled) leaves
        // it behind: it lives as long as the descriptor. Filled through the page cache and
        // synced, then switched to O_DIRECT (Linux lets F_SETFL change O_DIRECT).
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| ProbeError::io(format!("cannot create a file in {dir}"), e))?;
        let _ = std::fs::remove_file(&path);
        {
            use std::io::Write;
            let mut f = &file;
            let chunk = vec![0xA5u8; 1 << 20];
            let mut left = size;
            while left > 0 {
                let n = left.min(chunk.len());
                f.write_all(&chunk[..n]).map_err(|e| ProbeError::io(format!("writing {path}"), e))?;
                left -= n;
            }
            let _ = f.sync_all();
        }
        let fd: OwnedFd = file.into();
        // SAFETY: fd is a valid descriptor we own; F_GETFL/F_SETFL only read and set its flags.
        let set = unsafe {
            let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_DIRECT) == 0
        };
        if !set {
            let err = std::io::Error::last_os_error();
            return Err(if err.raw_os_error() == Some(libc::EINVAL) {
                ProbeError::NoDirectIo(dir.to_string())
            } else {
                ProbeError::io(format!("set O_DIRECT on {path}"), err)
            });
        }
        let layout = std::alloc::Layout::from_size_align(block, 4096)?;
        // SAFETY: layout has non-zero size; the pointer is checked and freed in Drop.
        let buf = unsafe { std::alloc::alloc_zeroed(layout) };
        if buf.is_null() {
            return Err(ProbeError::NoIoBuffer);
        }
        Ok(Box::new(IoSession {
            fd,
            buf,
            layout,
            block,
            blocks: (size / block) as u64,
            write: params.str("op") == "write",
            rng: 0x2545_F491_4F6C_DD1D,
            cpu: pool.first(),
        }))
    }
}

impl Session for IoSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let off = (self.rng % self.blocks) as i64 * self.block as i64;
        let fd = self.fd.as_raw_fd();
        let t0 = mono_ns();
        // SAFETY: buf is an aligned allocation of `block` bytes; fd is our open file.
        let n = unsafe {
            if self.write {
                let n = libc::pwrite(fd, self.buf.cast(), self.block, off);
                if n >= 0 && libc::fdatasync(fd) != 0 {
                    -1
                } else {
                    n
                }
            } else {
                libc::pread(fd, self.buf.cast(), self.block, off)
            }
        };
        let t1 = mono_ns();
        if n != self.block as isize {
            return Err(ProbeError::os(if self.write { "O_DIRECT write" } else { "O_DIRECT read" }));
        }
        Ok((t1 - t0) as f64)
    }
}

impl Drop for IoSession {
    fn drop(&mut self) {
        // SAFETY: buf was allocated with this layout in setup and is freed once.
        unsafe { std::alloc::dealloc(self.buf, self.layout) };
    }
}
