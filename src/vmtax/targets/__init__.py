"""vmtax.targets"""
