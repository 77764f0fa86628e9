"""The ``irflow`` command line (click).

May import everything else of irflow.
"""

from irflow.cli.main import main

__all__ = ["main"]
