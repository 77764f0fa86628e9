"""``python -m irflow``: the ``irflow`` command line, for when the script is not on PATH."""

from irflow.cli import main

if __name__ == "__main__":
    main(prog_name="irflow")
