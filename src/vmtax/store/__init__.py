"""vmtax.store"""
