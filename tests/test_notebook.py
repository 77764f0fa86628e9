"""The example notebook (examples/reports.ipynb) runs headless through ``nbconvert --execute``, and what a
notebook shows by default is each object's HTML view: tables and SVG, no script.

Needs the ``notebook`` extra (nbconvert, nbclient, nbformat, ipykernel); skipped, with the reason, without it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "reports.ipynb"

MISSING = [m for m in ("nbconvert", "nbclient", "nbformat", "ipykernel") if importlib.util.find_spec(m) is None]


@pytest.mark.slow
@pytest.mark.skipif(bool(MISSING), reason=f"the notebook extra is not installed ({', '.join(MISSING)} missing): "
                                           "pip install -e '.[notebook]'")
def test_the_example_notebook_runs_and_shows_html(tmp_path):
    done = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute",
                           "--ExecutePreprocessor.timeout=120", "--ExecutePreprocessor.kernel_name=python3",
                           "--output-dir", str(tmp_path), "--output", "executed.ipynb", str(NOTEBOOK)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    executed = json.loads((tmp_path / "executed.ipynb").read_text(encoding="utf-8"))
    code = [cell for cell in executed["cells"] if cell["cell_type"] == "code"]
    html = []
    for cell in code:
        assert not [o for o in cell["outputs"] if o["output_type"] == "error"], cell["source"]
        html.extend("".join(o["data"]["text/html"]) for o in cell["outputs"] if "text/html" in o.get("data", {}))
    recipe, result, trace, candidates, diff, evaluation = html
    assert '<svg class="dag"' in recipe and "<table" in recipe
    assert "unpack a zip archive" in result and "<table" in result
    assert '<svg class="dag"' in trace and '<svg class="bump"' in trace
    assert "fuse.dense.rank" in candidates
    assert "entered" in diff or "moved" in diff or "rescored" in diff
    assert "ndcg@10" in evaluation and "paired t-test" in evaluation
    assert all("<script" not in view for view in html)
    assert code[-1]["outputs"][0]["data"]["text/plain"] == ["True"]
