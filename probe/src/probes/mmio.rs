//! `mmio`: one 32-bit read of an emulated device's memory-mapped register, timed one by one.
//! A guest's access to a page that no guest RAM backs is a nested page fault that the
//! hypervisor finds is a device's (VMX `EPT_MISCONFIG`/`EPT_VIOLATION`, SVM `NPF`); it emulates
//! the access, in the kernel or, for a device the VMM emulates, in user space
//! (`KVM_EXIT_MMIO`). So the probe isolates the "nested page fault / MMIO" exit group the way
//! `portio` isolates port I/O.
//!
//! The register is in BAR 0 of QEMU's PCI test device (`-device pci-testdev`, vendor 0x1b36,
//! device 0x0005), which every vmtax guest has: a device made for timing exits, which no Linux
//! driver claims and whose registers do nothing when read. Any other device is refused: a read
//! of a real device's register can have effects (an interrupt status register clears itself
//! when read), and a driver's BAR is not ours to map.
//!
//! The BAR is mapped through sysfs (`/sys/bus/pci/devices/D/resource0`, uncached), which needs
//! root; where there is no test device (bare metal, or a VM not started by vmtax), the stream
//! ends with one line saying so.

use super::{net_ns, CpuPool, Defaults, Probe, ProbeError, Session, Spec, ALL_ARCHES};
use crate::clock::{ns_per_tick, overhead_ticks, ticks_start, ticks_stop};
use crate::output::Better;
use crate::params::Params;
use std::path::{Path, PathBuf};

pub struct Mmio;
pub static MMIO: Mmio = Mmio;

/// QEMU's PCI test device (hw/misc/pci-testdev.c), as sysfs writes its IDs.
const TESTDEV: (&str, &str) = ("0x1b36", "0x0005");
const PCI_DEVICES: &str = "/sys/bus/pci/devices";
/// Where the hint sends a user without a test device.
const NO_DEVICE_HINT: &str = "vmtax's guests have one; elsewhere start QEMU with -device pci-testdev";

static SPEC: Spec = Spec {
    name: "mmio",
    summary: "one read of a memory-mapped register of QEMU's PCI test device, timed one by one (root)",
    mechanism: "MMIO VM exit (nested page fault on a device's page, emulated by the VMM)",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: None,
    params: &[],
    needs_root: true,
    arches: ALL_ARCHES,
    // As portio: an exit to the VMM in user space costs microseconds.
    defaults: Defaults { runs: 5, iterations: 20_000, duration_s: 0.2, warmup: 200 },
};

/// The test device's sysfs directory under `root`, if there is one.
fn find_testdev(root: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(root)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|dev| {
            let id = |name: &str| std::fs::read_to_string(dev.join(name)).map(|s| s.trim().to_string());
            matches!((id("vendor"), id("device")), (Ok(v), Ok(d)) if (v.as_str(), d.as_str()) == TESTDEV)
        })
        .collect();
    found.sort(); // the first by address, whatever the directory's order
    found.into_iter().next()
}

/// BAR 0's start and length from the device's `resource` file (one "start end flags" line
/// per BAR, in hex).
fn bar0(resource: &str) -> Option<(u64, u64)> {
    let mut fields = resource.lines().next()?.split_whitespace();
    let mut hex = || u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok();
    let (start, end) = (hex()?, hex()?);
    (end > start).then(|| (start, end - start + 1))
}

/// A mapping of BAR 0, unmapped on drop.
struct Mapping {
    base: *mut libc::c_void,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: base and len are those mmap returned, and nothing else unmaps them.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

struct MmioSession {
    _map: Mapping,
    register: *const u32,
    overhead: f64,
    ns_per_tick: f64,
    cpu: usize,
}

fn map_bar0(dev: &Path) -> Result<(Mapping, *const u32), ProbeError> {
    let what = |name: &str| dev.join(name).display().to_string();
    let resource = std::fs::read_to_string(dev.join("resource"))
        .map_err(|source| ProbeError::Io { what: what("resource"), source })?;
    let (start, len) = bar0(&resource).ok_or(ProbeError::NoMmioBar(what("resource")))?;
    // Memory decoding on (no driver enabled the device), so the read reaches its register.
    std::fs::write(dev.join("enable"), "1").map_err(|source| ProbeError::Io { what: what("enable"), source })?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .open(dev.join("resource0"))
        .map_err(|source| ProbeError::Io { what: what("resource0"), source })?;
    // sysfs maps the page that holds the BAR's start: the register is that far into it.
    let page = 4096u64;
    let offset = (start % page) as usize;
    let map_len = (offset as u64 + len).div_ceil(page) as usize * page as usize;
    use std::os::fd::AsRawFd;
    // SAFETY: a shared, read-only mapping of the file; the result is checked.
    let base =
        unsafe { libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
    if base == libc::MAP_FAILED {
        return Err(ProbeError::Io {
            what: format!("mmap {}", what("resource0")),
            source: std::io::Error::last_os_error(),
        });
    }
    let map = Mapping { base, len: map_len };
    // SAFETY: offset < 4096 <= map_len, inside the mapping; the BAR starts 4-byte aligned.
    let register = unsafe { (base as *const u8).add(offset) } as *const u32;
    Ok((map, register))
}

impl Probe for Mmio {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, _params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        crate::affinity::pin(&[pool.first()])?;
        let dev = find_testdev(Path::new(PCI_DEVICES)).ok_or(ProbeError::NoTestDevice(NO_DEVICE_HINT))?;
        let (map, register) = map_bar0(&dev)?;
        Ok(Box::new(MmioSession {
            _map: map,
            register,
            overhead: overhead_ticks(),
            ns_per_tick: ns_per_tick(),
            cpu: pool.first(),
        }))
    }
}

impl Session for MmioSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let a = ticks_start();
        // SAFETY: register points into the live mapping of the test device's BAR 0, whose
        // registers do nothing when read; volatile, so every iteration makes the access.
        let v = unsafe { std::ptr::read_volatile(self.register) };
        let b = ticks_stop();
        std::hint::black_box(v);
        Ok(net_ns(a, b, self.overhead, self.ns_per_tick))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar0_is_the_first_resource_line() {
        let text = "0x00000000fea00000 0x00000000fea007ff 0x0000000000040200\n\
                    0x000000000000c000 0x000000000000c0ff 0x0000000000040101\n";
        assert_eq!(bar0(text), Some((0xfea0_0000, 0x800)));
        assert_eq!(bar0("0x0000000000000000 0x0000000000000000 0x0000000000000000\n"), None);
        assert_eq!(bar0(""), None);
    }

    #[test]
    fn only_the_test_device_is_found() {
        let root = std::env::temp_dir().join(format!("vmtax-mmio-{}", std::process::id()));
        let make = |name: &str, vendor: &str, device: &str| {
            let dev = root.join(name);
            std::fs::create_dir_all(&dev).unwrap();
            std::fs::write(dev.join("vendor"), format!("{vendor}\n")).unwrap();
            std::fs::write(dev.join("device"), format!("{device}\n")).unwrap();
        };
        make("0000:00:02.0", "0x1af4", "0x1042"); // virtio-blk: a driver's device
        assert_eq!(find_testdev(&root), None);
        make("0000:00:04.0", "0x1b36", "0x0005");
        make("0000:00:03.0", "0x1b36", "0x0005");
        assert_eq!(find_testdev(&root), Some(root.join("0000:00:03.0")));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn without_a_test_device_the_refusal_is_one_line_that_says_what_to_do() {
        let e = ProbeError::NoTestDevice(NO_DEVICE_HINT);
        let line = crate::probes::RunErr::Setup(e).to_string();
        assert!(line.starts_with("setup: mmio: no QEMU PCI test device (1b36:0005): "), "{line}");
        assert!(line.contains("-device pci-testdev") && !line.contains('\n'), "{line}");
    }

    #[test]
    fn setup_maps_the_device_or_refuses_as_sysfs_says() {
        // Decided by sysfs itself: with a test device (a vmtax guest), the probe measures.
        let pool = CpuPool { cpus: vec![crate::affinity::current().unwrap_or(0)], requested: false };
        let params = crate::params::resolve("mmio", SPEC.params, &[]).unwrap();
        let present = find_testdev(Path::new(PCI_DEVICES)).is_some();
        let got =
            std::thread::spawn(move || MMIO.setup(&params, &pool).map(|mut s| s.iterate().unwrap())).join().unwrap();
        match got {
            Ok(ns) => assert!(present && ns >= 0.0),
            Err(ProbeError::NoTestDevice(_)) => assert!(!present),
            Err(e) => assert!(present, "{e}"), // present but not mappable (not root)
        }
    }
}
