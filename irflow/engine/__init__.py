"""The engine: recipes, their validation and graph, the executor, results, traces, the Stage base and its ports.

May import: :mod:`irflow.store`, :mod:`irflow.kernels`, :mod:`irflow.util`, :mod:`irflow.errors`.
"""
