"""vmtax: measure the virtualization tax, what each layer of hypervisor costs a workload."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("vmtax")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
