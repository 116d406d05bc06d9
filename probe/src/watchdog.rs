//! `watchdog`: stands between the controller and a guest's QEMU, so that the guest dies with
//! its controller however the controller dies (SIGKILL included, which skips every cleanup
//! the controller could run itself).
//!
//! The controller holds the only write end of a pipe and passes the read end here (`--fd`).
//! The kernel closes the write end when the controller exits, whatever the cause, so EOF on
//! the read end means "the controller is gone": then QEMU is killed and its scratch directory
//! (`--dir`) removed. QEMU in turn gets a parent-death signal from this process. That is safe
//! here and not in the controller: the signal fires when the *thread* that forked the child
//! ends, and this process has one thread, while the controller starts guests from worker
//! threads that come and go.
//!
//! While the controller lives, this process mirrors QEMU: it prints QEMU's pid on stdout, and
//! exits as QEMU exits (the same code, or killed by the same signal), so the controller's
//! view of the guest process is QEMU's.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum WatchdogError {
    #[error("--dir {0} is not a vmtax scratch directory (its name must start with vmtax-)")]
    NotScratch(String),
    #[error("--fd {0} is not an open file descriptor")]
    BadFd(i32),
    #[error("no command to run after --")]
    NoCommand,
    #[error("cannot start {cmd}: {source}")]
    Spawn { cmd: String, source: std::io::Error },
    #[error("{what}: {source}")]
    Sys { what: &'static str, source: std::io::Error },
}

impl WatchdogError {
    /// 2 for usage errors, 1 for failures at run time (the agent's convention).
    pub fn exit_code(&self) -> i32 {
        match self {
            WatchdogError::NotScratch(_) | WatchdogError::BadFd(_) | WatchdogError::NoCommand => 2,
            _ => 1,
        }
    }
}

fn sys(what: &'static str) -> WatchdogError {
    WatchdogError::Sys { what, source: std::io::Error::last_os_error() }
}

/// Run `argv` as the watched child; returns only on an error before it started, or with the
/// exit code to leave with once the controller is gone.
pub fn run(fd: i32, dir: &str, argv: &[String]) -> Result<i32, WatchdogError> {
    let name = std::path::Path::new(dir).file_name().and_then(|n| n.to_str()).unwrap_or("");
    if !name.starts_with("vmtax-") {
        return Err(WatchdogError::NotScratch(dir.to_string()));
    }
    let (cmd, args) = argv.split_first().ok_or(WatchdogError::NoCommand)?;
    // SAFETY: fcntl on an integer fd has no memory effects; it fails on a closed fd.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } == -1 {
        return Err(WatchdogError::BadFd(fd)); // close-on-exec: QEMU does not inherit it
    }
    // SIGCHLD is blocked and read from a signalfd, so one poll() waits for both events.
    let chld = block_sigchld()?;
    let me = std::process::id() as libc::pid_t;
    let mut command = Command::new(cmd);
    command.args(args).stdin(Stdio::null()).stdout(Stdio::null());
    // SAFETY: only async-signal-safe calls between fork and exec. std resets the signal mask
    // and SIGPIPE in the child, so QEMU starts as it would from the controller.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != me {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH)); // already gone
            }
            Ok(())
        });
    }
    let child = command.spawn().map_err(|source| WatchdogError::Spawn { cmd: cmd.clone(), source })?;
    let pid = child.id() as libc::pid_t;
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{pid}");
        let _ = out.flush();
    }
    loop {
        let mut fds = [
            libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: chld, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: fds is a valid array of two pollfd for the duration of the call.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } == -1 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(sys("poll"));
        }
        if fds[1].revents != 0 {
            drain(chld);
            if let Some(status) = reaped(pid, libc::WNOHANG)? {
                mirror(status);
            }
        }
        if fds[0].revents != 0 && controller_gone(fd) {
            // SAFETY: pid is our unreaped child, so it cannot have been recycled.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            reaped(pid, 0)?;
            match std::fs::remove_dir_all(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    eprintln!("vmtax-probe: error: watchdog: cannot remove {dir}: {e}");
                    return Ok(1);
                }
                _ => return Ok(0),
            }
        }
    }
}

fn block_sigchld() -> Result<i32, WatchdogError> {
    // SAFETY: plain libc calls on a local, initialised signal set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) == -1 {
            return Err(sys("sigprocmask"));
        }
        let sfd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC);
        if sfd == -1 {
            return Err(sys("signalfd"));
        }
        Ok(sfd)
    }
}

/// Read the pending SIGCHLD notices (they coalesce; the wait below is what counts).
fn drain(sfd: i32) {
    let mut info = [0u8; std::mem::size_of::<libc::signalfd_siginfo>()];
    // SAFETY: reads at most info.len() bytes into info.
    unsafe { libc::read(sfd, info.as_mut_ptr().cast(), info.len()) };
}

/// The child's wait status once it has ended; None while it runs (with WNOHANG).
fn reaped(pid: libc::pid_t, flags: i32) -> Result<Option<i32>, WatchdogError> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out pointer.
        let got = unsafe { libc::waitpid(pid, &mut status, flags) };
        if got == pid {
            return Ok(Some(status));
        }
        if got == 0 {
            return Ok(None);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(sys("waitpid"));
        }
    }
}

/// EOF (or an error) on the pipe: every write end is closed, so the controller has exited.
fn controller_gone(fd: i32) -> bool {
    let mut buf = [0u8; 64];
    // SAFETY: reads at most buf.len() bytes into buf.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    n == 0 || (n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR))
}

/// Leave as QEMU left: with its exit code, or killed by its signal (no core file of our own).
fn mirror(status: i32) -> ! {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        // SAFETY: plain libc calls; the process ends here.
        unsafe {
            let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(sig);
        }
        std::process::exit(128 + sig);
    }
    std::process::exit(libc::WEXITSTATUS(status));
}
