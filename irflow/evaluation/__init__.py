"""Evaluation: test collections, metrics, significance tests, parameter sweeps, the evaluation cache.

May import: :mod:`irflow.engine` and everything below it.
"""
