"""Offline evaluations of the online models on real traces and load series."""
