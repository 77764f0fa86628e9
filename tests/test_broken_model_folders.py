"""A broken user model folder ("onnx:DIR") is one EmbedderError naming the file and the fix, never a traceback.

Each case is a copy of the real model's folder (the models extra; skipped
cleanly without it) with one thing wrong: a tokenizer.json that the
tokenizers library cannot read (``{}``), nested 100,000 deep, not JSON, not
an object; a model.onnx that is garbage or empty; a directory where a file
should be; a config file that is wrong.  From the Python API
(``irflow.build``) and the command line (``index``, ``run``, ``demo``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

import pytest
from click.testing import CliRunner

import irflow
from irflow.cli import main
from irflow.errors import EmbedderError
from irflow.kernels import onnx_embedder
from irflow.util.extras import install_hint

pytestmark = pytest.mark.skipif(not onnx_embedder.pinned_model_available(),
                                reason=f"the models extra is not installed ({install_hint('models')})")

DEEP = "[" * 100_000 + "]" * 100_000
TOKENIZER_FIX = "put the model's own tokenizer.json there"
MODEL_FIX = "put the model's ONNX export there"
CONFIG_FIX = "restore the file the model came with, or remove it"


def _write(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text, encoding="utf-8")


def _directory(path: Path) -> None:
    path.mkdir()


#: case -> (the file to break, how, what the message must say besides the file)
CASES: dict[str, tuple[str, Callable[[Path], None], tuple[str, ...]]] = {
    "tokenizer-empty-object": ("tokenizer.json", _write("{}"),
                               ("the tokenizers library cannot read this tokenizer file", TOKENIZER_FIX)),
    "tokenizer-nested-100000-deep": ("tokenizer.json", _write(DEEP),
                                     ("nested 100000 levels deep; the limit is 64", TOKENIZER_FIX)),
    "tokenizer-not-json": ("tokenizer.json", _write("<html>not found</html>"), ("is not JSON", TOKENIZER_FIX)),
    "tokenizer-a-list": ("tokenizer.json", _write("[]"), ("must be a JSON object, but it holds a list",
                                                          TOKENIZER_FIX)),
    "tokenizer-a-directory": ("tokenizer.json", _directory, ("must be a regular file, but this is a directory",
                                                             TOKENIZER_FIX)),
    "model-garbage": ("model.onnx", lambda p: p.write_bytes(b"garbage" * 100), ("onnxruntime cannot load this ONNX "
                                                                                 "model", MODEL_FIX)),
    "model-empty": ("model.onnx", lambda p: p.write_bytes(b""), ("onnxruntime cannot load this ONNX model",
                                                                 MODEL_FIX)),
    "model-a-directory": ("model.onnx", _directory, ("must be a regular file, but this is a directory", MODEL_FIX)),
    "config-a-list": ("sentence_bert_config.json", _write("[256]"), ("must be a JSON object", CONFIG_FIX)),
    "config-nested-100000-deep": ("sentence_bert_config.json", _write(DEEP), ("nested 100000 levels deep",
                                                                              CONFIG_FIX)),
    "pooling-not-json": ("1_Pooling/config.json", _write("{mean"), ("is not JSON", CONFIG_FIX)),
    "pooling-a-directory": ("1_Pooling/config.json", _directory, ("must be a regular file", CONFIG_FIX)),
}


def _model_folder(root: Path, broken: str | None = None, breaking: Callable[[Path], None] | None = None) -> Path:
    """A copy of the real model's folder (the files left whole are links to the installed ones)."""
    files = onnx_embedder._pinned_files()
    root.mkdir(parents=True)
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256}))
    (root / "model.onnx").symlink_to(files.model)
    (root / "tokenizer.json").symlink_to(files.tokenizer)
    if broken is not None and breaking is not None:
        target = root / broken
        target.unlink()
        breaking(target)
    return root


RECORDS = [{"artifact_id": "unbox", "surface_kind": "name", "text": "unpack any archive"},
           {"artifact_id": "rank-bm25", "surface_kind": "name", "text": "BM25 ranking functions"}]


def test_the_intact_copy_works(tmp_path):
    corpus = irflow.build(RECORDS, embedder=f"onnx:{_model_folder(tmp_path / 'm')}")
    assert corpus.dim == 384


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_python_api_raises_one_embedder_error_naming_the_file(tmp_path, case):
    broken, breaking, says = CASES[case]
    folder = _model_folder(tmp_path / "m", broken, breaking)
    with pytest.raises(EmbedderError) as caught:
        irflow.build(RECORDS, embedder=f"onnx:{folder}")
    message = str(caught.value)
    assert str(folder / broken) in message
    for words in says:
        assert words in message
    assert "\n" not in message


@pytest.mark.parametrize("case", ["tokenizer-empty-object", "tokenizer-nested-100000-deep", "model-garbage",
                                  "model-a-directory", "config-a-list"])
def test_the_cli_index_says_one_paragraph(tmp_path, case):
    broken, breaking, says = CASES[case]
    folder = _model_folder(tmp_path / "m", broken, breaking)
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    result = CliRunner().invoke(main, ["index", str(records), "--out", str(tmp_path / "c"), "--embedder",
                                       f"onnx:{folder}"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert str(folder / broken) in result.output and says[-1] in result.output


def test_the_cli_run_says_one_paragraph_when_the_folder_broke_after_indexing(tmp_path):
    folder = _model_folder(tmp_path / "m")
    irflow.build(RECORDS, embedder=f"onnx:{folder}", path=tmp_path / "c")
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").write_text("{}")
    result = CliRunner().invoke(main, ["run", "hybrid", "--corpus", str(tmp_path / "c"), "-q", "zip archive"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert f"{folder / 'tokenizer.json'}: the tokenizers library cannot read this tokenizer file" in result.output


def test_the_cli_demo_says_one_paragraph(tmp_path, monkeypatch):
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    folder = _model_folder(tmp_path / "m", "tokenizer.json", _write(DEEP))
    result = CliRunner().invoke(main, ["demo", "zip archive", "--embedder", f"onnx:{folder}"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert f"{folder / 'tokenizer.json'}: the tokenizer file: nested 100000 levels deep" in result.output


def test_a_garbage_model_that_loads_but_cannot_run_is_named(tmp_path, monkeypatch):
    """A model onnxruntime loads but that fails on tokenized text (or answers in another shape) is named too."""
    folder = _model_folder(tmp_path / "m")
    embedder = onnx_embedder.OnnxEmbedder(str(folder))
    _, session, names = embedder.load()

    class Failing:
        def run(self, outputs, feeds):
            raise RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions\nfor input")

    class Flat:
        def run(self, outputs, feeds):
            return [[1.0, 2.0]]

    for session, says in ((Failing(), "onnxruntime cannot run this model on tokenized text (["),
                          (Flat(), "outputs shape (2,) for 1 texts")):
        embedder._state["session"] = (embedder._state["session"][0], session, names)
        with pytest.raises(EmbedderError, match=re.escape(str(folder / "model.onnx"))) as caught:
            embedder(["some text"])
        assert says in str(caught.value) and MODEL_FIX in str(caught.value)
