"""Kernels: pure functions and small classes over numpy arrays — BM25 and postings, dense top-k, top-k selection,
metadata filters and columns, text analyzers and stopwords, embedders.

They know nothing of corpora, recipes or stages.  May import: :mod:`irflow.util`, :mod:`irflow.errors`.
"""
