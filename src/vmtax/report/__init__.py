"""vmtax.report"""
