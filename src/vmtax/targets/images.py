"""Guest images built from the host's Debian packages, cached by the hash of their inputs.

The minimal image is a kernel (``linux-image-amd64``) plus an initramfs holding
``busybox-static``, the static agent, the virtio modules it needs and a tiny ``/init`` that
hands PID 1 to the agent. Same inputs, same hash, same directory: nothing is rebuilt.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import lzma
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs

from vmtax.errors import VmtaxError
from vmtax.targets import cpio

#: Bump when the image layout changes so that old cache entries are not reused.
FORMAT = 3
#: What the guest needs: the PCI transport, virtio-serial (the agent's channel), and
#: virtio-blk + ext4 (which also mounts ext2; it needs crc32c) for the scratch disk.
MINIMAL_MODULES = (
    "virtio_pci",
    "virtio_console",
    "virtio_blk",
    "crc32c_generic",
    "ext4",
    "virtio_net",  # for guests given a NIC (--guest-net user)
)
#: Loaded only when the guest has a virtio NIC (listed apart, in etc/vmtax-net-modules):
#: three modules fewer to load at every boot without a network.
NET_MODULES = ("virtio_net",)
#: What a guest needs to be a KVM host itself: QEMU's TCG emulates AMD SVM (not VMX), so
#: kvm_amd and what it links (irqbypass, ccp, kvm). The init script inserts kvm_amd with
#: nested=1 so that the guest it boots can run KVM again.
KVM_MODULES = ("kvm_amd",)
#: Inner accelerators a nested image can boot its guest with.
INNER_ACCELS = ("tcg", "kvm")
BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")


@dataclass(frozen=True)
class Image:
    """A bootable guest: kernel + initramfs in one cache directory."""

    kind: str
    digest: str
    directory: Path
    manifest: dict[str, Any]

    @property
    def kernel(self) -> Path:
        return self.directory / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.directory / "initrd.cpio"

    @property
    def boot_kernel(self) -> Path:
        """What QEMU boots: the uncompressed kernel with its PVH entry where the image has
        one (``vmlinux``, see ``pvh_kernel``), else the compressed one."""
        elf = self.directory / "vmlinux"
        return elf if elf.is_file() else self.kernel

    def provenance(self) -> dict[str, Any]:
        return {"image": self.kind, "image_hash": self.digest, **self.manifest}


def cache_dir() -> Path:
    """Where images live: ``$VMTAX_CACHE_DIR`` or the XDG cache dir (``~/.cache/vmtax``)."""
    base = os.environ.get("VMTAX_CACHE_DIR") or platformdirs.user_cache_dir("vmtax")
    return Path(base) / "images"


def _version_key(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def find_kernel(kernel: str | Path | None = None) -> tuple[Path, Path]:
    """The guest kernel and its module tree: an explicit path, ``$VMTAX_KERNEL``, or the
    newest ``/boot/vmlinuz-*`` that has a ``/lib/modules/<version>``."""
    chosen = kernel or os.environ.get("VMTAX_KERNEL")
    if chosen:
        path = Path(chosen)
        if not path.is_file():
            raise VmtaxError(f"guest kernel not found: {path}")
        version = path.name.removeprefix("vmlinuz-")
        return path, Path("/lib/modules") / version
    found = sorted(Path("/boot").glob("vmlinuz-*"), key=lambda p: _version_key(p.name))
    for path in reversed(found):
        mods = Path("/lib/modules") / path.name.removeprefix("vmlinuz-")
        if mods.is_dir():
            return path, mods
    raise VmtaxError(
        "no guest kernel: install linux-image-amd64 (needs /boot/vmlinuz-* and its /lib/modules)"
    )


def find_busybox() -> Path:
    for cand in BUSYBOX_CANDIDATES:
        path = Path(cand)
        if path.is_file() and is_static(path):
            return path
    raise VmtaxError("no static busybox: install busybox-static")


def is_static(path: Path) -> bool:
    """True when the ELF file has no program interpreter (PT_INTERP), i.e. runs anywhere."""
    with path.open("rb") as fh:
        head = fh.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit ELF only
            return False
        (phoff,) = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        fh.seek(phoff)
        table = fh.read(phentsize * phnum)
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != 3 for i in range(phnum))


def module_closure(moddir: Path, names: tuple[str, ...]) -> list[str]:
    """Relative paths of ``names`` and everything they depend on, in load order."""
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    dep_file = moddir / "modules.dep"
    if not dep_file.is_file():
        raise VmtaxError(f"no {dep_file}: the kernel's modules are not installed")
    for line in dep_file.read_text().splitlines():
        mod, _, rest = line.partition(":")
        deps[mod] = rest.split()
        base = Path(mod).name.split(".ko")[0].replace("-", "_")
        by_name[base] = mod
    order: list[str] = []

    def visit(mod: str) -> None:
        if mod in order:
            return
        # modules.dep lists a module's dependencies so that the last must load first.
        for dep in reversed(deps.get(mod, [])):
            visit(dep)
        order.append(mod)

    for name in names:
        if name not in by_name:
            if (moddir / "modules.builtin").is_file() and name in (
                moddir / "modules.builtin"
            ).read_text():
                continue  # built into the kernel, nothing to load
            raise VmtaxError(f"kernel module {name} not found under {moddir}")
        visit(by_name[name])
    return order


def _module_bytes(path: Path) -> bytes:
    # busybox insmod cannot read compressed modules: decompress at build time.
    data = path.read_bytes()
    if path.suffix == ".xz":
        return lzma.decompress(data)
    if path.suffix == ".gz":
        return gzip.decompress(data)
    if path.suffix == ".zst":
        raise VmtaxError(f"zstd-compressed module {path} not supported; decompress it first")
    return data


def _guest_file(name: str) -> bytes:
    return resources.files("vmtax.targets").joinpath("guest", name).read_bytes()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


GUEST_HOSTS = b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"


def _base_entries(init: bytes, busybox: bytes) -> list[cpio.Entry]:
    entries = [cpio.directory(d) for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "root")]
    entries += [
        cpio.chardev("dev/console", 5, 1),
        cpio.chardev("dev/null", 1, 3),
        cpio.regular("bin/busybox", busybox, 0o755),
        cpio.symlink("bin/sh", "busybox"),
        cpio.regular("init", init, 0o755),
        # The agent's resolver (static glibc's or musl's) reads names from here: without it
        # not even "localhost" resolves in a busybox guest.
        cpio.regular("etc/hosts", GUEST_HOSTS),
    ]
    return entries


def _module_entries(
    moddir: Path, wanted: tuple[str, ...] = MINIMAL_MODULES, listing: str = "etc/vmtax-modules"
) -> tuple[list[cpio.Entry], list[str]]:
    """The kernel modules a guest loads (``wanted`` and their dependencies) under
    lib/modules, and ``listing`` naming them in load order for the init script; with those
    names. The directories come with the default set only (they are in every image)."""
    entries = [cpio.directory("lib"), cpio.directory("lib/modules")]
    if wanted != MINIMAL_MODULES:
        entries = []
    names = []
    for rel in module_closure(moddir, wanted):
        name = Path(rel).name.split(".ko")[0] + ".ko"
        names.append(name)
        entries.append(cpio.regular(f"lib/modules/{name}", _module_bytes(moddir / rel)))
    # The NIC's driver and what only it needs are listed apart: /init loads them when a
    # virtio NIC is there.
    later: list[str] = []
    if wanted == MINIMAL_MODULES:
        base = tuple(m for m in wanted if m not in NET_MODULES)
        needed = {Path(rel).name.split(".ko")[0] + ".ko" for rel in module_closure(moddir, base)}
        later = [n for n in names if n not in needed]
        listed = "".join(f"{n}\n" for n in later)
        entries.append(cpio.regular("etc/vmtax-net-modules", listed.encode()))
    first = [n for n in names if n not in later]
    entries.append(cpio.regular(listing, ("\n".join(first) + "\n").encode()))
    return entries, names


def _unpacked_kernel(root: Path, kernel_sha: str, out: Path) -> bool:
    """Write the PVH kernel of the kernel whose SHA-256 is ``kernel_sha`` at ``out``: a hard
    link to an image's in ``root`` that has it (66 MB each, and about 5 s to unpack), else
    unpacked from the kernel. False when the kernel has none."""
    for manifest in root.glob("*/manifest.json"):
        elf = manifest.parent / "vmlinux"
        with contextlib.suppress(OSError, ValueError):
            same = json.loads(manifest.read_text()).get("kernel_sha256") == kernel_sha
            if same and elf.is_file():
                try:
                    os.link(elf, out)
                except OSError:  # another file system, or links refused: a copy
                    shutil.copyfile(elf, out)
                return True
    elf_bytes = pvh_kernel((out.parent / "vmlinuz").read_bytes())  # copied there already
    if elf_bytes is None:
        return False
    out.write_bytes(elf_bytes)
    return True


def _build(kind: str, kernel: Path, entries: list[cpio.Entry], manifest: dict[str, Any]) -> Image:
    kernel_bytes = kernel.read_bytes()
    h = hashlib.sha256(f"vmtax-image/{FORMAT}/{kind}".encode())
    h.update(_sha(kernel_bytes).encode())
    for e in entries:
        h.update(f"{e.path}:{e.mode:o}:{e.rdev}:{_sha(e.data)}\n".encode())
    digest = h.hexdigest()[:16]
    target = cache_dir() / f"{kind}-{digest}"
    if (target / "manifest.json").is_file():
        return Image(kind, digest, target, json.loads((target / "manifest.json").read_text()))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Build beside the target and rename: a half-written image is never visible.
        tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=target.parent))
    except OSError as exc:  # a cache directory that is a file, read-only, or full
        raise VmtaxError(
            f"cannot build images in {target.parent} ($VMTAX_CACHE_DIR or the user cache "
            f"directory): {exc.strerror or exc}"
        ) from None
    try:
        shutil.copyfile(kernel, tmp / "vmlinuz")
        manifest = {**manifest, "kernel_sha256": _sha(kernel_bytes)}
        # The accelerator test boots once per host boot: not worth unpacking a kernel for.
        if kind != "accel-test" and _unpacked_kernel(
            target.parent, _sha(kernel_bytes), tmp / "vmlinux"
        ):
            manifest["boot_kernel"] = "vmlinux (PVH entry)"
        with (tmp / "initrd.cpio").open("wb") as out:
            cpio.write_newc(out, entries)
        manifest = {"kind": kind, "hash": digest, "kernel": kernel.name, **manifest}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        try:
            tmp.rename(target)
        except OSError:  # built concurrently by another process: keep theirs
            if not (target / "manifest.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Image(kind, digest, target, manifest)


#: Where an x86 bzImage's compressed payload starts: XZ (Debian's) or gzip.
_PAYLOAD_MAGIC = ((b"\xfd7zXZ\x00", "xz"), (b"\x1f\x8b\x08\x00", "gzip"))
#: Xen's ELF note XEN_ELFNOTE_PHYS32_ENTRY: the 32-bit entry QEMU's PVH boot jumps to.
_PVH_NOTE = 18


def pvh_kernel(bzimage: bytes) -> bytes | None:
    """The uncompressed kernel (``vmlinux``) inside ``bzimage``, if it has a PVH entry.

    Under TCG the kernel's own decompressor is the longest part of a boot: measured with
    bench/boot_cost.py, XZ-decompressing Debian's kernel took several CPU seconds of an L1
    boot of about twelve. QEMU boots an ELF kernel with a PVH entry note directly (its
    ``pvh.bin`` option ROM, or qboot), so decompressing once here, when the image is built,
    saves it at every boot. Written by hand because no library unpacks a bzImage: the
    payload is found by its magic (the kernel's own scripts/extract-vmlinux does the same).
    A kernel with no such payload, or without the note, is booted as before (None)."""
    for magic, kind in _PAYLOAD_MAGIC:
        start = bzimage.find(magic)
        if start < 0:
            continue
        try:
            if kind == "xz":
                elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(bzimage[start:])
            else:
                elf = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(bzimage[start:])
        except (lzma.LZMAError, zlib.error):
            continue
        if _has_pvh_note(elf):
            return elf
    return None


def _has_pvh_note(elf: bytes) -> bool:
    """True when the 64-bit ELF ``elf`` has a Xen PHYS32_ENTRY note in a PT_NOTE segment."""
    if elf[:5] != b"\x7fELF\x02" or len(elf) < 64:
        return False
    (phoff,) = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        base = phoff + i * phentsize
        if base + 0x28 > len(elf):
            return False
        p_type, _, p_offset = struct.unpack_from("<IIQ", elf, base)
        (p_filesz,) = struct.unpack_from("<Q", elf, base + 0x20)
        if p_type != 4:  # PT_NOTE
            continue
        pos, end = p_offset, min(p_offset + p_filesz, len(elf))
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
            name = elf[pos + 12 : pos + 12 + namesz].rstrip(b"\x00")
            if name == b"Xen" and ntype == _PVH_NOTE:
                return True
            pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


@dataclass(frozen=True)
class ImageContents:
    """What a minimal image carries besides busybox and the agent: programs, each at its own
    path with the libraries it loads (ldd; a path missing on this machine is skipped), and
    small files by path inside the image (e.g. ``etc/passwd`` for a server that switches to a
    user). Always an explicit argument: whoever boots a guest says what is in it, so two
    entry points asking for the same contents get the same image."""

    binaries: tuple[str, ...] = ()
    files: tuple[tuple[str, bytes], ...] = ()

    def plus(
        self, binaries: tuple[str, ...] = (), files: dict[str, bytes] | None = None
    ) -> ImageContents:
        merged = {**dict(self.files), **(files or {})}
        return ImageContents(
            tuple(dict.fromkeys((*self.binaries, *binaries))), tuple(sorted(merged.items()))
        )


#: The agent alone: about 19 MB, for guests that run only probes in little memory.
AGENT_ONLY = ImageContents()


def build_minimal(
    agent: Path,
    *,
    kernel: str | Path | None = None,
    contents: ImageContents = AGENT_ONLY,
) -> Image:
    """The busybox initramfs with ``agent`` as ``/vmtax-probe`` and ``contents`` (cached by
    what goes in). The workloads' contents (``vmtax.workloads.image_contents()``) make it
    about 113 MB with MariaDB and PostgreSQL; a sweep's 128 MiB guests unpack the archive in
    their RAM, so they boot ``AGENT_ONLY`` (19 MB)."""
    if not is_static(agent):
        raise VmtaxError(
            f"agent {agent} is dynamically linked; a guest needs the static build "
            "(cargo build --release --target x86_64-unknown-linux-gnu)"
        )
    kernel_path, moddir = find_kernel(kernel)
    busybox = find_busybox()
    modules, names = _module_entries(moddir)
    entries = _base_entries(_guest_file("init"), busybox.read_bytes()) + modules
    entries.append(cpio.regular("vmtax-probe", agent.read_bytes(), 0o755))
    manifest: dict[str, Any] = {
        "modules": names,
        "agent_sha256": _sha(agent.read_bytes()),
        "busybox": str(busybox),
    }
    extra = [Path(b) for b in contents.binaries if Path(b).is_file()]
    extra_files = dict(contents.files)
    if extra or extra_files:
        files = _binaries_with_libraries(extra)
        files.update({p: (data, 0o644) for p, data in extra_files.items()})
        existing = {e.path for e in entries}
        entries += [d for d in _with_parents(sorted(files)) if d.path not in existing]
        entries += [cpio.regular(p, data, mode) for p, (data, mode) in sorted(files.items())]
        manifest["extra_binaries"] = [str(b) for b in extra]
        manifest["extra_files"] = sorted(extra_files)
    return _build("minimal", kernel_path, entries, manifest)


#: qboot.rom: the small firmware the KVM levels boot with (see guest/init-nested).
QEMU_FIRMWARE = (
    "bios-256k.bin",
    "linuxboot_dma.bin",
    "linuxboot.bin",
    "kvmvapic.bin",
    "qboot.rom",
)
FIRMWARE_DIRS = (Path("/usr/share/qemu"), Path("/usr/share/seabios"))


def _shared_libraries(binary: Path) -> list[Path]:
    """The ELF interpreter and every library ``binary`` loads, as ``ldd`` resolves them."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise VmtaxError(f"ldd {binary} failed: {out.stderr.strip() or out.stdout.strip()}")
    libs = []
    for line in out.stdout.splitlines():
        words = line.split()
        path = words[2] if len(words) >= 3 and words[1] == "=>" else words[0] if words else ""
        if path.startswith("/"):
            libs.append(Path(path))
    return libs


def _with_parents(paths: list[str]) -> list[cpio.Entry]:
    dirs: list[str] = []
    for p in paths:
        parts = Path(p).parts[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in dirs:
                dirs.append(d)
    return [cpio.directory(d) for d in dirs]


def _binaries_with_libraries(binaries: list[Path]) -> dict[str, tuple[bytes, int]]:
    """Each binary at its own path and every library it loads (as ldd resolves them)."""
    files: dict[str, tuple[bytes, int]] = {}
    for binary in binaries:
        files[str(binary).lstrip("/")] = (binary.read_bytes(), 0o755)
        for lib in _shared_libraries(binary):
            files[str(lib).lstrip("/")] = (lib.resolve().read_bytes(), 0o755)
    return files


def build_nested(
    agent: Path,
    depth: int,
    *,
    kernel: str | Path | None = None,
    inner_accel: str = "tcg",
    extra_binaries: tuple[Path, ...] = (),
    contents: ImageContents = AGENT_ONLY,
) -> Image:
    """An image whose guest boots the next level itself, ``depth`` levels in all: depth 1 is
    the minimal image; depth n holds QEMU, its libraries and firmware, a kernel and the
    depth n-1 image, and relays the inner agent's port to its own (cached).

    ``inner_accel="tcg"`` boots the inner guest under TCG (QEMU's TCG module is shipped);
    ``"kvm"`` ships kvm_amd and its dependencies instead and boots it under the guest's own
    KVM (the init script checks for SVM and /dev/kvm first). ``extra_binaries`` are added
    with the libraries they load (e.g. ``perf`` for a one-off capture image). ``contents``
    go into the innermost (minimal) image, where the agent that is measured runs."""
    if inner_accel not in INNER_ACCELS:
        raise VmtaxError(f"unknown inner accelerator {inner_accel!r} (choose tcg or kvm)")
    if depth <= 1:
        return build_minimal(agent, kernel=kernel, contents=contents)
    inner = build_nested(
        agent, depth - 1, kernel=kernel, inner_accel=inner_accel, contents=contents
    )
    kernel_path, moddir = find_kernel(kernel)
    qemu = shutil.which("qemu-system-x86_64")
    if not qemu:
        raise VmtaxError("qemu-system-x86_64 not found: install qemu-system-x86")
    binaries = [Path(qemu)]
    if inner_accel == "tcg":
        # Debian builds TCG as a loadable QEMU module: ship it (and what it links) too.
        binaries += sorted(Path("/usr/lib/x86_64-linux-gnu/qemu").glob("accel-tcg-*.so"))
    files = _binaries_with_libraries(binaries + [Path(b) for b in extra_binaries])
    for name in QEMU_FIRMWARE:
        # Debian keeps SeaBIOS in its own package directory; the guest gets one -L dir.
        found = [d / name for d in FIRMWARE_DIRS if (d / name).exists()]
        if not found:
            raise VmtaxError(f"QEMU firmware {name} not found (install qemu-system-x86)")
        files[f"usr/share/qemu/{name}"] = (found[0].resolve().read_bytes(), 0o644)
    files["guest/vmlinuz"] = (inner.kernel.read_bytes(), 0o644)
    files["guest/initrd.cpio"] = (inner.initrd.read_bytes(), 0o644)
    modules, _ = _module_entries(moddir)
    kvm_names: list[str] = []
    if inner_accel == "kvm":
        kvm_modules, kvm_names = _module_entries(moddir, KVM_MODULES, "etc/vmtax-kvm-modules")
        modules += kvm_modules
    entries = _base_entries(_guest_file("init-nested"), find_busybox().read_bytes()) + modules
    # The agent here too: it serves the host side (port vmtax-host) of this level.
    entries.append(cpio.regular("vmtax-probe", agent.read_bytes(), 0o755))
    existing = {e.path for e in entries}
    entries += [d for d in _with_parents(sorted(files)) if d.path not in existing]
    entries += [cpio.regular(path, data, mode) for path, (data, mode) in sorted(files.items())]
    manifest: dict[str, Any] = {
        "depth": depth,
        "inner_image": inner.digest,
        "agent_sha256": inner.manifest.get("agent_sha256"),
        "qemu": qemu,
        "inner_accel": inner_accel,
    }
    if kvm_names:
        manifest["kvm_modules"] = kvm_names
    if extra_binaries:
        manifest["extra_binaries"] = [str(b) for b in extra_binaries]
    kind = f"nested{depth}" if inner_accel == "tcg" else f"nested{depth}-kvm"
    return _build(kind, kernel_path, entries, manifest)


def build_accel_test(*, kernel: str | Path | None = None) -> Image:
    """A guest whose /init prints a marker and powers off: proof that a guest boots."""
    kernel_path, _ = find_kernel(kernel)
    busybox = find_busybox()
    entries = _base_entries(_guest_file("accel-test-init"), busybox.read_bytes())
    return _build("accel-test", kernel_path, entries, {})


def list_images() -> list[Image]:
    """Every image in the cache, newest first."""
    root = cache_dir()
    found = []
    if root.is_dir():
        for manifest in root.glob("*/manifest.json"):
            data = json.loads(manifest.read_text())
            found.append(Image(data.get("kind", "?"), data.get("hash", "?"), manifest.parent, data))
    found.sort(key=lambda im: im.directory.stat().st_mtime, reverse=True)
    return found
