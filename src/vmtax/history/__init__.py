"""The tax across stored experiments (`vmtax history`): steps in one probe's overhead and what
changed in the environment there.

- ``steps``: change points proposed by ruptures on the boot-level log overheads, each tested
  by a permutation of whole experiments (the unit above boots) against the largest split
  statistic, and the tests' false-discovery rate controlled across probes;
- ``changes``: what the environment fingerprint says changed between two experiments
  (kernel, QEMU, CPU model and microcode, hypervisor).
"""
