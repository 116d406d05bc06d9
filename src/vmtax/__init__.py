"""vmtax: measure the virtualization tax, what each layer of hypervisor costs a workload."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vmtax.version import __version__ as __version__

__all__ = ["Results", "__version__", "open", "run"]


def __getattr__(name: str) -> object:
    if name == "__version__":
        # Read from the installed metadata (importlib.metadata, 30 ms) only when asked: the
        # console script imports this package before vmtax.entry can handle SIGTERM, and
        # until then a SIGTERM ends the process silently (143).
        from vmtax.version import __version__

        return __version__
    # The notebook API pulls in pandas and SQLAlchemy: load it only when asked for, so
    # `import vmtax` (and the CLI's start-up) stays fast.
    if name in ("open", "Results", "run"):
        from vmtax import api  # deferred: pandas and SQLAlchemy, only when the API is used

        return getattr(api, name)
    raise AttributeError(f"module 'vmtax' has no attribute {name!r}")
