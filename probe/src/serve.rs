//! `serve`: the transport for guests. Requests arrive one per line on a device (a
//! virtio-serial port or a tty) as a JSON array of agent arguments; each is run as a child
//! of this agent with its stdout streamed back line by line, then a `serve_done` frame.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

const STDERR_TAIL: usize = 2048;

/// A transport frame. `type` is its first field, so that a reader can tell a frame from a
/// contract line by the line's first bytes however long the rest is (serde_json's `json!`
/// sorts keys, which put `type` after a stderr tail of any length).
#[derive(serde::Serialize)]
struct Frame<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent_version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stderr_tail: Option<&'a str>,
}

fn frame(f: &Frame) -> String {
    let mut s = serde_json::to_string(f).expect("serializable");
    s.push('\n');
    s
}

pub fn ready_frame() -> String {
    frame(&Frame {
        kind: "serve_ready",
        agent_version: Some(crate::output::AGENT_VERSION),
        exit_code: None,
        stderr_tail: None,
    })
}

pub fn done_frame(code: i32, stderr_tail: &str) -> String {
    frame(&Frame { kind: "serve_done", agent_version: None, exit_code: Some(code), stderr_tail: Some(stderr_tail) })
}

fn make_raw(f: &File) {
    let fd = f.as_raw_fd();
    // SAFETY: isatty only inspects the fd.
    if unsafe { libc::isatty(fd) } != 1 {
        return;
    }
    // SAFETY: termios is plain old data filled by tcgetattr; cfmakeraw edits it in place.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(fd, &mut t) == 0 {
            libc::cfmakeraw(&mut t);
            libc::tcsetattr(fd, libc::TCSANOW, &t);
        }
    }
}

/// Whether the host end of a virtio-serial port is gone (poll reports POLLHUP).
fn host_gone(f: &File) -> bool {
    let mut p = libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: p is one valid pollfd; zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & libc::POLLHUP != 0 && p.revents & libc::POLLIN == 0
}

/// Why serving a device stopped (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot open {path}: {source}")]
    Open { path: String, source: std::io::Error },
    #[error("{path}: {source}")]
    Device { path: String, source: std::io::Error },
    #[error("wait: {0}")]
    Wait(std::io::Error),
    #[error("writing to the device: {0}")]
    Write(std::io::Error),
}

/// The executable to run requests with.
fn self_exe() -> std::path::PathBuf {
    if std::path::Path::new("/proc/self/exe").exists() {
        if let Ok(p) = std::fs::read_link("/proc/self/exe") {
            return p;
        }
    }
    std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into())
}

/// Serve requests on `path` until EOF (or forever on a virtio port when `reconnect`,
/// since the host may attach later). Returns when asked to power off.
pub fn serve(path: &str, reconnect: bool) -> Result<(), ServeError> {
    let device = |source| ServeError::Device { path: path.to_string(), source };
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags_noctty()
        .open(path)
        .map_err(|source| ServeError::Open { path: path.to_string(), source })?;
    make_raw(&dev);
    let mut out = dev.try_clone().map_err(device)?;
    loop {
        if reconnect {
            while host_gone(&dev) {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
        out.write_all(ready_frame().as_bytes()).map_err(device)?;
        let mut reader = BufReader::new(dev.try_clone().map_err(device)?);
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(device(e)),
            }
            let req = line.trim();
            if req.is_empty() {
                continue;
            }
            let argv: Vec<String> = match serde_json::from_str(req) {
                Ok(a) => a,
                Err(_) => {
                    let msg = "vmtax-probe: error: request is not a JSON array of strings";
                    out.write_all(done_frame(2, msg).as_bytes()).map_err(device)?;
                    continue;
                }
            };
            if argv.len() == 1 && argv[0] == "poweroff" {
                // SAFETY: sync has no arguments.
                unsafe { libc::sync() };
                return Ok(());
            }
            let (code, tail) = run_request(&argv, &mut out)?;
            out.write_all(done_frame(code, &tail).as_bytes()).map_err(device)?;
            reap_zombies();
        }
        if !reconnect {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Reap any exited children (orphans are re-parented to init). Here and not in pid1.rs,
/// which starts `serve`: the dependency runs one way, pid1 -> serve.
pub fn reap_zombies() {
    loop {
        // SAFETY: waitpid with WNOHANG and a null status pointer.
        let r = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if r <= 0 {
            break;
        }
    }
}

/// Run one request as a child; stream its stdout to `out`; return (exit code, stderr tail).
fn run_request(argv: &[String], out: &mut File) -> Result<(i32, String), ServeError> {
    let mut child = match Command::new(self_exe())
        .args(argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Ok((127, format!("vmtax-probe: error: cannot start the agent: {e}"))),
    };
    let mut err = child.stderr.take().expect("piped stderr");
    let tail = std::thread::spawn(move || {
        let mut keep: Vec<u8> = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            keep.extend_from_slice(&buf[..n]);
            if keep.len() > STDERR_TAIL {
                keep.drain(..keep.len() - STDERR_TAIL);
            }
        }
        String::from_utf8_lossy(&keep).into_owned()
    });
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout);
    let mut buf = Vec::new();
    let mut write_err = None;
    loop {
        buf.clear();
        match lines.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                if !buf.ends_with(b"\n") {
                    buf.push(b'\n');
                }
                if let Err(e) = out.write_all(&buf) {
                    write_err = Some(e);
                    let _ = child.kill();
                    break;
                }
            }
        }
    }
    let status = child.wait().map_err(ServeError::Wait)?;
    let tail = tail.join().unwrap_or_default();
    if let Some(e) = write_err {
        return Err(ServeError::Write(e));
    }
    use std::os::unix::process::ExitStatusExt;
    let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Ok((code, tail))
}

trait NoCtty {
    fn custom_flags_noctty(&mut self) -> &mut Self;
}

impl NoCtty for std::fs::OpenOptions {
    fn custom_flags_noctty(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NOCTTY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_start_with_their_type_whatever_follows() {
        let tail = "vmtax-probe: error: invalid --iterations 1: must be in 2..1000000000\n";
        let done = done_frame(2, tail);
        assert!(done.starts_with(r#"{"type":"serve_done","exit_code":2,"stderr_tail":"vmtax-probe: error"#), "{done}");
        let v: serde_json::Value = serde_json::from_str(&done).unwrap();
        assert_eq!(v["stderr_tail"], tail);
        assert!(ready_frame().starts_with(r#"{"type":"serve_ready","agent_version":""#));
        assert!(ready_frame().ends_with("}\n"));
    }
}
