"""--plugin MODULE: the user names the code that registers stage kinds on the command line (recipes never do)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import irflow
from irflow.cli import main
from irflow.engine import unregister_stage

STAGE = '''
import attrs
from irflow.engine.ports import CANDIDATES, Port
from irflow.engine import param, positive_int, register_stage, Stage


@register_stage
@attrs.frozen
class KeepTop(Stage):
    kind = "keep_top_plugin"
    inputs = (Port("candidates", CANDIDATES),)
    output = CANDIDATES
    n: int = param(1, validator=positive_int, doc="candidates kept per query")

    def output_scales(self, inputs):
        return inputs["candidates"][0].scales

    def run(self, ctx, candidates):
        return candidates.cut(self.n)
'''

RECIPE = '''
[recipe]
name = "top"
output = "top"

[params]
n = 1

[stages.candidates]
kind = "filter"

[stages.lexical]
kind = "lexical"
inputs = ["candidates"]
fetch_k = 10

[stages.top]
kind = "keep_top_plugin"
inputs = ["lexical"]
n = "$n"
'''


# "zip" is in two of five records; the shorter ranks first
DOCS = [("a", "zip"), ("b", "zip tar gz"), ("c", "tar"), ("d", "gz"), ("e", "rar")]


@pytest.fixture()
def workdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "my_stages.py").write_text(STAGE, encoding="utf-8")
    (tmp_path / "top.toml").write_text(RECIPE, encoding="utf-8")
    irflow.build([irflow.Record(a, "name", text) for a, text in DOCS], path=tmp_path / "c", embedder=None)
    yield tmp_path
    for name in ("my_stages", "broken_stages", "syntax_stages"):
        sys.modules.pop(name, None)
    unregister_stage("keep_top_plugin")


def invoke(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_without_the_plugin_the_kind_is_unknown_and_the_message_says_how(workdir):
    result = invoke("validate", "top.toml")
    assert result.exit_code == 1 and "unknown kind 'keep_top_plugin'" in result.output
    assert "--plugin MODULE imports the module that registers them" in result.output


@pytest.mark.parametrize("plugin", ["my_stages", "my_stages.py", "./my_stages.py"])
def test_validate_graph_run_with_the_plugin(workdir, plugin):
    assert invoke("validate", "top.toml", "--plugin", plugin).exit_code == 0
    graph = invoke("graph", "top.toml", "--plugin", plugin)
    assert graph.exit_code == 0 and "keep_top_plugin" in graph.output
    run = invoke("run", "top.toml", "--plugin", plugin, "--corpus", "c", "-q", "zip", "--json")
    assert run.exit_code == 0, run.output
    hits = json.loads(run.stdout)["queries"][0]["hits"]
    assert [h["artifact_id"] for h in hits] == ["a"]  # the plugin's stage cut the ranking to n = 1
    assert len(json.loads(invoke("run", "top.toml", "--plugin", plugin, "--corpus", "c", "-q", "zip", "--set",
                                 "n=2", "--json").stdout)["queries"][0]["hits"]) == 2


def test_eval_takes_plugins(workdir):
    data = workdir / "tiny"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text("".join(json.dumps({"_id": a, "text": t}) + "\n" for a, t in DOCS))
    (data / "queries.jsonl").write_text('{"_id": "q", "text": "zip"}\n')
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\ta\t1\n")
    result = invoke("eval", "top.toml", "--plugin", "my_stages", "--dataset", data, "--metrics", "p@1", "--no-cache",
                    "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["systems"] == {"top": {"p@1": 1.0}}


def test_a_missing_module_is_a_clear_usage_error(workdir):
    result = invoke("run", "top.toml", "--plugin", "no_such_module", "--corpus", "c", "-q", "zip")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "cannot import 'no_such_module': no module named 'no_such_module'" in result.output
    result = invoke("validate", "top.toml", "--plugin", "missing.py")
    assert result.exit_code == 2 and "no such file: missing.py" in result.output


def test_a_plugin_that_fails_to_import_says_why_without_a_traceback(workdir):
    (workdir / "broken_stages.py").write_text("raise RuntimeError('needs a licence key')\n")
    result = invoke("validate", "top.toml", "--plugin", "broken_stages")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "cannot import 'broken_stages': RuntimeError: needs a licence key" in result.output
    (workdir / "syntax_stages.py").write_text("def broken(:\n")
    result = invoke("graph", "top.toml", "--plugin", "syntax_stages")
    assert result.exit_code == 2 and "SyntaxError" in result.output and "syntax_stages.py, line 1" in result.output


def test_a_recipe_file_still_cannot_name_code(workdir):
    (workdir / "sneaky.toml").write_text(RECIPE + '\n[plugins]\nimport = ["my_stages"]\n')
    result = invoke("validate", "sneaky.toml")
    assert result.exit_code == 1 and "unknown top-level table 'plugins'" in result.output
    assert "my_stages" not in sys.modules
