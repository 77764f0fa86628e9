"""The store: records, corpora (in memory and on disk, updated in place), persistence, generations, the ledger.

May import: :mod:`irflow.kernels`, :mod:`irflow.util`, :mod:`irflow.errors`.
"""
