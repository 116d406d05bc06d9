//! Duties of PID 1, when the agent is the init of a minimal guest: mount /proc, /sys and
//! /dev, reap orphans, and power off instead of exiting (an exiting init panics the kernel).

use std::ffi::CString;
use std::path::Path;

pub fn is_pid1() -> bool {
    // SAFETY: getpid has no arguments and cannot fail.
    unsafe { libc::getpid() == 1 }
}

fn mount(fstype: &str, target: &str) {
    let _ = std::fs::create_dir_all(target);
    let (src, ty, tgt) = (CString::new(fstype).unwrap(), CString::new(fstype).unwrap(), CString::new(target).unwrap());
    // SAFETY: all three are valid NUL-terminated strings; no mount data.
    let rc = unsafe { libc::mount(src.as_ptr(), tgt.as_ptr(), ty.as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        eprintln!("vmtax-probe: mount {fstype} on {target}: {}", std::io::Error::last_os_error());
    }
}

fn mounted(target: &str) -> bool {
    std::fs::read_to_string("/proc/mounts")
        .map(|m| m.lines().any(|l| l.split_whitespace().nth(1) == Some(target)))
        .unwrap_or(false)
}

/// Mount what the agent needs and make sure stdio points somewhere.
pub fn setup() {
    if !Path::new("/proc/self").exists() {
        mount("proc", "/proc");
    }
    if !Path::new("/sys/kernel").exists() {
        mount("sysfs", "/sys");
    }
    if !mounted("/dev") {
        mount("devtmpfs", "/dev");
    }
    // An init started without a console has no fds 0-2.
    for fd in 0..3 {
        // SAFETY: fcntl F_GETFD only queries the descriptor.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            let console = CString::new("/dev/console").unwrap();
            // SAFETY: valid path; the new fd is duplicated onto `fd` and the original closed.
            unsafe {
                let c = libc::open(console.as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
                if c >= 0 && c != fd {
                    libc::dup2(c, fd);
                    libc::close(c);
                }
            }
        }
    }
    std::panic::set_hook(Box::new(|info| {
        eprintln!("vmtax-probe: panic as init: {info}");
        poweroff();
    }));
}

/// Sync and power the machine off (as init), never returning.
pub fn poweroff() -> ! {
    // SAFETY: sync and reboot take no pointers; RB_POWER_OFF needs CAP_SYS_BOOT, which init has.
    unsafe {
        libc::sync();
        libc::reboot(libc::RB_POWER_OFF);
    }
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

/// The /dev node of the virtio-serial port named `name`, waiting up to `wait_s` for it.
pub fn find_port(name: &str, wait_s: f64) -> Option<String> {
    let start = std::time::Instant::now();
    loop {
        if let Ok(rd) = std::fs::read_dir("/sys/class/virtio-ports") {
            for e in rd.flatten() {
                let n = std::fs::read_to_string(e.path().join("name")).unwrap_or_default();
                if n.trim() == name {
                    let dev = format!("/dev/{}", e.file_name().to_string_lossy());
                    if Path::new(&dev).exists() {
                        return Some(dev);
                    }
                }
            }
        }
        if start.elapsed().as_secs_f64() > wait_s {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Init entry point: with no arguments serve on the `vmtax` port; with arguments run that
/// command (stdout on the console); then power off.
pub fn main(args: &[String]) -> ! {
    setup();
    if args.is_empty() {
        match find_port("vmtax", 10.0) {
            Some(dev) => {
                if let Err(e) = crate::serve::serve(&dev, true) {
                    eprintln!("vmtax-probe: error: serve {dev}: {e}");
                }
            }
            None => eprintln!("vmtax-probe: error: no virtio-serial port named vmtax (/sys/class/virtio-ports/*/name)"),
        }
    } else {
        let exe = std::fs::read_link("/proc/self/exe").unwrap_or_else(|_| "/proc/self/exe".into());
        match std::process::Command::new(exe).args(args).status() {
            Ok(s) if !s.success() => eprintln!("vmtax-probe: exit status {s}"),
            Ok(_) => {}
            Err(e) => eprintln!("vmtax-probe: error: cannot run {args:?}: {e}"),
        }
    }
    crate::serve::reap_zombies();
    poweroff()
}
