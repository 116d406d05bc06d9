"""Host-side exit profiles: which VM exits a level costs, counted on the hypervisor that runs
the measured guest (study E's performance monitor, study C's exit multiplication).

- ``reasons``: SVM and VMX exit codes and their names (the kernel's spelling);
- ``groups``: study E's grouping of reasons;
- ``parse_perf``: the output of ``perf kvm stat report --event=vmexit``;
- ``recorder``: brackets every probe run with ``vmtax-probe exits start/stop`` on each host
  side the target offers and stores the profile;
- ``store``: the tables' read/write API (``exit_profiles``);
- ``table``: study E's Table 2 shape (count, time and share normalised to a baseline).

This package reads from and writes to the store; it never starts a guest (targets do) and
never formats (cli and report do).
"""
