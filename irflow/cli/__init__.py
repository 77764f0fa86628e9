"""The ``irflow`` command line (click).

May import everything else of irflow.
"""

from irflow.cli.app import main

__all__ = ["main"]
