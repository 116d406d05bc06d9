"""vmtax.sampling: adaptive sampling. Add runs until each probe's 95% interval is as narrow as
asked, or the time budget is spent; choose each run's length; sample the machine's noise
around every look; say which probes stayed imprecise. See docs/statistics.md."""
