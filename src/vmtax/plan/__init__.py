"""vmtax.plan"""
