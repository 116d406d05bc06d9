"""Generators of synthetic data with known effects, for tests, benchmarks and trying the
statistics without a machine to measure. vmtax itself never uses them on real data.

- ``runs``: runs and samples in the ``Store.runs()`` layout, with planted overheads;
- ``report_store``: a whole experiment written into a store, for report tests;
- ``stored``: experiments with chosen boots and fingerprints written into a store (the gate,
  the OpenMetrics export, the history);
- ``sweeps``: overcommitment sweeps with study B's two shapes.
"""
