"""vmtax: measure the virtualization tax, what each layer of hypervisor costs a workload."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("vmtax")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

__all__ = ["Results", "__version__", "open", "run"]


def __getattr__(name: str) -> object:
    # The notebook API pulls in pandas and SQLAlchemy: load it only when asked for, so
    # `import vmtax` (and the CLI's start-up) stays fast.
    if name in ("open", "Results", "run"):
        from vmtax import api

        return getattr(api, name)
    raise AttributeError(f"module 'vmtax' has no attribute {name!r}")
