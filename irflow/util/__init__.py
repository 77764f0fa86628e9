"""Leaf helpers every layer may use: safe file reading and atomic writing, cache keys, optional extras, progress bars, plain-text tables, JSON outlines.

May import: the standard library, numpy, :mod:`irflow.errors`.  Nothing else of irflow.
"""
