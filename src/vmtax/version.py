"""The installed vmtax version, on its own so that any module can read it without loading the
package's notebook API (``vmtax.api``, which ``vmtax/__init__`` offers lazily)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("vmtax")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
