"""`vmtax image build|list`: the guest images QEMU levels boot, cached by content hash."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from vmtax.cli import options
from vmtax.errors import UsageError

image_app = typer.Typer(
    help="Build and list guest images for QEMU levels.\n\n"
    "Example: vmtax image build && vmtax image list",
    no_args_is_help=True,
)


@image_app.command("build")
def build(
    mode: Annotated[
        str,
        typer.Option(
            help="minimal (busybox initramfs, agent as PID 1; for L1) or full (also QEMU, a "
            "kernel and the inner image, so the guest hosts the next level)."
        ),
    ] = "minimal",
    depth: Annotated[
        int,
        typer.Option(
            callback=options.count(2, 3),
            help="For --mode full: how many levels the image holds (2 = L2, 3 = L3).",
        ),
    ] = 2,
    kernel: Annotated[
        str | None,
        typer.Option(callback=options.path, help="Guest kernel (default: newest /boot/vmlinuz-*)."),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(callback=options.path, help="Static vmtax-probe binary to put inside."),
    ] = None,
) -> None:
    """Build (or find in the cache) a bootable guest image.

    Example: vmtax image build --mode minimal
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment import machine

    if mode not in machine.IMAGE_MODES:
        raise UsageError(f"unknown image mode {mode!r} (choose minimal or full)")
    if mode == "full" and depth not in (2, 3):
        raise UsageError(f"--depth must be 2 or 3 for --mode full, got {depth}")
    t0 = time.monotonic()
    image = machine.build_image(mode, depth, kernel=kernel, agent=agent)
    took = time.monotonic() - t0
    size = image.initrd.stat().st_size / 2**20
    Console().print(
        f"image {image.kind}-{image.digest}: {image.directory} "
        f"(initrd {size:.1f} MiB, kernel {image.manifest.get('kernel')}, {took:.1f} s)",
        markup=False,
        highlight=False,
    )


@image_app.command("list")
def list_cmd() -> None:
    """List the cached guest images, newest first.

    Example: vmtax image list
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment import machine

    cache, images = machine.images()
    console = Console()
    if not images:
        console.print(f"no images in {cache}; build one with: vmtax image build", markup=False)
        return
    table = Table("image", "hash", "kernel", "agent sha256", "initrd MiB", "path")
    for im in images:
        size = im.initrd.stat().st_size / 2**20 if im.initrd.is_file() else 0.0
        table.add_row(
            im.kind,
            im.digest,
            str(im.manifest.get("kernel", "")),
            str(im.manifest.get("agent_sha256", ""))[:12],
            f"{size:.1f}",
            str(im.directory),
        )
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.add_typer(image_app, name="image")
