//! CPU lists and pinning (sched_setaffinity).

/// Why a CPU list could not be read or the thread could not be pinned.
#[derive(Debug, thiserror::Error)]
pub enum AffinityError {
    #[error("invalid CPU list {0:?} (expected e.g. 0 or 0,2 or 0-3)")]
    BadList(String),
    #[error("invalid CPU list {0:?}")]
    EmptyList(String),
    #[error("CPU {0} out of range")]
    OutOfRange(usize),
    #[error("sched_setaffinity {cpus:?}: {source}")]
    Pin { cpus: Vec<usize>, source: std::io::Error },
}

/// Parse a CPU list such as "0", "0,2", "0-3" or "0-1,4".
pub fn parse_list(s: &str) -> Result<Vec<usize>, AffinityError> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let bad = || AffinityError::BadList(s.to_string());
        if let Some((a, b)) = part.split_once('-') {
            let (a, b): (usize, usize) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
            if a > b {
                return Err(bad());
            }
            out.extend(a..=b);
        } else {
            out.push(part.parse().map_err(|_| bad())?);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|c| seen.insert(*c));
    if out.is_empty() {
        return Err(AffinityError::EmptyList(s.to_string()));
    }
    Ok(out)
}

/// CPUs this process may run on.
pub fn allowed() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain old data; sched_getaffinity fills it for pid 0 (this thread).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is valid and writable with the size passed.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return vec![0];
    }
    // SAFETY: CPU_ISSET only reads the set within CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
}

/// The CPU the calling thread runs on now.
pub fn current() -> Option<usize> {
    // SAFETY: sched_getcpu has no arguments and no memory effects.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

/// Pin every thread a child process will start to one CPU: called between fork and exec,
/// where only async-signal-safe calls are allowed, so the set is built here, before the fork.
pub fn pin_before_exec(cmd: &mut std::process::Command, cpu: usize) -> Result<(), AffinityError> {
    use std::os::unix::process::CommandExt;
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(AffinityError::OutOfRange(cpu));
    }
    // SAFETY: cpu_set_t is plain old data; cpu < CPU_SETSIZE.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the closure makes one system call on a set it owns, nothing else.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

/// Pin the calling thread to the given CPUs.
pub fn pin(cpus: &[usize]) -> Result<(), AffinityError> {
    // SAFETY: cpu_set_t is plain old data.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= libc::CPU_SETSIZE as usize {
            return Err(AffinityError::OutOfRange(c));
        }
        // SAFETY: c < CPU_SETSIZE, so CPU_SET writes inside the set.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: set is a valid cpu_set_t of the size passed; pid 0 means the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(AffinityError::Pin { cpus: cpus.to_vec(), source: std::io::Error::last_os_error() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(parse_list("0").unwrap(), vec![0]);
        assert_eq!(parse_list("0-2,5,1").unwrap(), vec![0, 1, 2, 5]);
        assert!(parse_list("3-1").is_err());
        assert!(parse_list("a").is_err());
        assert!(parse_list("").is_err());
    }
}
