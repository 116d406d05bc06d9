"""vmtax.stats"""
