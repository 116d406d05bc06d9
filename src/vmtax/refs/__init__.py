"""vmtax.refs"""
