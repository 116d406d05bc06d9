"""vmtax.sweep: overcommitment sweeps (study B).

A sweep scales one thing in steps (the number of guests, the vCPU:pCPU ratio, or guest
memory against a cgroup memory cap), runs the workload in every guest at once at each step,
discards a warm-up and samples a steady-state window at a fixed interval. Each committed step
is stored (``sweep_steps`` / ``sweep_samples``); ``vmtax.stats.knee`` finds the knee.

- ``spec``: axes, steps, timings and presets (study B's steps and timings);
- ``host``: host-side sampling (CPU utilisation, vCPU run-queue wait, memory, paging);
- ``cgroup``: the memory cap around the guests' QEMU processes;
- ``run``: the step loop, resume and failure handling;
- ``store``: the tables and what ``vmtax sweep show`` reads;
- ``synthetic``: study B's two shapes with known knees, for tests.
"""
