"""Noise profiles: the between-boot and within-boot (run) variance of each probe, per machine
and configuration, learnt from a dimensioning experiment (`vmtax calibrate`) and from every
experiment since; the designs they call for (Kalibera and Jones' runs per boot, and boots for
a target precision); and the boot-level variance a small experiment may borrow from them.

``components``: the one-way random-effects sums of squares of one experiment, pooled across
experiments with their degrees of freedom, and intervals of both components. ``profile``:
what is stored per (machine, configuration, probe, metric), and the key of a machine.
``plan``: designs from a profile. ``borrow``: pooling a profile's boot-mean variance with an
experiment's own, and the F-test that says when the profile no longer applies.
"""
