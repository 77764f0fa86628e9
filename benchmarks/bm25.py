"""BM25 top-10 at one corpus size: irflow against rank_bm25 (and bm25s when installed).

The first benchmark of the project, kept for its command; ``lexical.py`` is
the full comparison (several sizes, SciFact, build time and memory).

    python benchmarks/bm25.py --docs 100000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lexical  # noqa: E402  (the sibling script)


def main(argv: Sequence[str] | None = None) -> object:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=100_000, help="records in the Zipfian corpus (default 100000)")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args(argv)
    return lexical.main(["--sizes", str(args.docs), "--queries", str(args.queries), "--no-scifact", "--no-memory"])


if __name__ == "__main__":
    main()
