"""vmtax.sweep: overcommitment sweeps (study B).

A sweep scales one thing in steps (the number of guests, the vCPU:pCPU ratio, or guest
memory against a cgroup memory cap) and measures every step in several replicates: rounds of
freshly booted guests, each running every step once in a random order from a stored seed.
At each step it runs the workload in every guest at once, discards a warm-up and samples a
steady-state window at a fixed interval. Each committed unit (one step of one replicate) is
stored (``sweep_steps`` / ``sweep_samples``); ``vmtax.stats.knee`` finds the knee from the
replicate means.

- ``spec``: axes, steps, timings and presets (study B's steps and timings);
- ``host``: host-side sampling (CPU utilisation, vCPU run-queue wait, memory, paging);
- ``cgroup``: the memory cap around the guests' QEMU processes;
- ``run``: the step loop, the closed-loop clients, resume and failure handling, on the
  execution engine of ``vmtax.runner`` (its storing, progress and end of an experiment);
- ``guests``: the guests of the steps: QEMU guests (L1, ``qemu``) or agent processes (L0);
- ``tiers``, ``triplet``: study B's web, app and db guests (``--workload triplet``), their
  sizes, and the clients on this machine that drive them;
- ``gueststeal``: a guest's own steal, read inside it, when its clients run elsewhere;
- ``summary``: a stored sweep as per-step figures and the analysis;
- study B's two shapes with known knees, for tests, are in ``vmtax.testing.sweeps``.
"""
