"""The vmtax version, on its own so that any module can read it without loading the package's
notebook API (``vmtax.api``, which ``vmtax/__init__`` offers lazily).

It is written here once and read at build time (pyproject.toml's ``dynamic = ["version"]``
takes it from this attribute without importing the package), so starting a command never
asks ``importlib.metadata`` for it: that lookup scanned every installed distribution and cost
a third of a second of each start. tests/test_startup.py holds the installed metadata to it.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
