"""The seed API: search, as_retriever, fuse_hits, reranking, boosts, expand and the module constants.

May import: :mod:`irflow.engine` and everything below it.
"""
