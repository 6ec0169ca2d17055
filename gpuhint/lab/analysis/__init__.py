"""Characterize a cluster from its job trace (``gpuhint analyze``): pure, pandas + matplotlib."""
