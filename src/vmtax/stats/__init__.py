"""vmtax.stats: statistics on stored runs. It computes and returns DataFrames and dataclasses;
formatting lives in vmtax.report.

- ``describe``: study A's description of a set of runs (mean, StdErr, StdErr%, 95% t interval);
- ``compare``: overhead vs a baseline with calibrated CIs, adjusted p-values and verdicts;
- ``intervals`` / ``significance``: the intervals and the tests behind ``compare``;
- ``artifacts``: timing artifacts in raw samples (periodic spikes, cross-run memory, warm-up,
  shape change, outliers);
- ``synthetic``: runs with planted effects, for tests and benchmarks.
"""
