"""`vmtax explain`: a configuration's overhead per operation over its baseline one level
down, decomposed by exit reason group (exits per operation × cost per exit) plus a residual,
with the fraction the exits explain and its interval (docs/model.md, "Explaining an
overhead").

- ``decompose``: the arithmetic and the interval, on arrays of runs;
- ``inputs``: picking the configuration, the baseline and the probes from the store.
"""

from vmtax.explain.decompose import COLUMNS, RESIDUAL, SPLIT_COLUMNS, ProbeRuns, explain, split

__all__ = ["COLUMNS", "RESIDUAL", "SPLIT_COLUMNS", "ProbeRuns", "explain", "split"]
