"""A YAML recipe that names a key twice is refused, as TOML refuses it: at any level, naming the file, line and key.

PyYAML keeps the last of two equal keys without a word (``k: 10`` then
``k: 11`` gives 11), so a recipe edited by appending a line silently changed
meaning.  The loader stays safe (no constructor that runs code); only its
mappings check their keys.  The JSON values written by hand on the command
line (``--set``, ``--sweep``, the demo's ``--filter``) refuse a key named
twice in one object the same way.
"""

from __future__ import annotations

from typing import Any, Union

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

import engine_fakes  # noqa: F401  (maps irflow.stages / irflow.recipes in a bare checkout)
from irflow.cli.app import main, parse_sets
from irflow.engine.formats import read_yaml
from irflow.engine.recipe import Recipe, load_recipe
from irflow.errors import InputError, RecipeError
from irflow.util.fileio import loads_json

LEXICAL = load_recipe("lexical").to_yaml()


def _insert_after(text: str, line: str, new: str) -> tuple[str, int]:
    """``text`` with ``new`` inserted after its (first) line ``line``; and the 1-based line number of ``new``."""
    lines = text.splitlines()
    at = lines.index(line) + 1
    lines.insert(at, new)
    return "\n".join(lines) + "\n", at + 1


@pytest.mark.parametrize("after,duplicate,key", [
    ("  k: 10", "  k: 11", "k"),                                   # a parameter (the report's case)
    ("  name: lexical", "  name: other", "name"),                  # the [recipe] table
    ("    kind: lexical", "    kind: dense", "kind"),              # a stage's own keys
    ("    rule: over_fetch", "    rule: fixed", "rule"),           # a derived parameter
    ("    per_artifact: $per_artifact", "    per_artifact: false", "per_artifact"),  # the last line
])
def test_a_key_named_twice_in_a_recipe_file_is_refused(tmp_path, after, duplicate, key):
    text, line = _insert_after(LEXICAL, after, duplicate)
    path = tmp_path / "mine.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    message = str(caught.value)
    assert f"{path} line {line}" in message and f"the key {key!r} appears twice" in message
    assert f"first at line {line - 1}" in message


def test_top_level_tables_and_deep_values_are_checked_too():
    stages_twice = LEXICAL + "stages:\n  other:\n    kind: lexical\n"
    second, first = len(LEXICAL.splitlines()) + 1, LEXICAL.splitlines().index("stages:") + 1
    with pytest.raises(RecipeError, match=rf"r.yaml line {second}: the key 'stages' appears twice .*first at line {first}"):
        Recipe.from_yaml(stages_twice, source="r.yaml")
    deep = LEXICAL.replace("  filter: null\n", "  filter: {owner: me, tags: {in: [a]}, owner: you}\n")
    with pytest.raises(RecipeError, match=r"line 8: the key 'owner' appears twice .*first at line 8"):
        Recipe.from_yaml(deep, source="r.yaml")
    in_a_list = LEXICAL.replace("  filter: null\n", "  filter:\n    or:\n    - {a: 1}\n    - a: 2\n      b: 3\n      a: 4\n")
    with pytest.raises(RecipeError, match=r"line 13: the key 'a' appears twice .*first at line 11"):
        Recipe.from_yaml(in_a_list, source="r.yaml")


@pytest.mark.parametrize("text,key", [("a: 1\nyes: 2\ntrue: 3\n", "True"), ("a: 1\n~: 2\nnull: 3\n", "None"),
                                      ("a: 1\n1: 2\n0x1: 3\n", "1")])
def test_keys_equal_as_values_are_duplicates(text, key):
    # what PyYAML would fold into one Python key, whatever their spelling
    with pytest.raises(RecipeError, match=f"line 3: the key {key} appears twice"):
        read_yaml(text, "r.yaml")


def test_distinct_keys_and_merges_still_load():
    assert read_yaml("a: 1\n'1': 2\n1: 3\n", "r.yaml") == {"a": 1, "1": 2, 1: 3}
    assert read_yaml("a:\n  <<: {k: 1, j: 2}\n  k: 3\n", "r.yaml") == {"a": {"k": 3, "j": 2}}  # a merge may be overridden
    with pytest.raises(RecipeError, match="the key 'k' appears twice"):
        read_yaml("a:\n  <<: {k: 1, k: 2}\n", "r.yaml")
    assert Recipe.from_yaml(LEXICAL) == load_recipe("lexical")


def test_the_loader_stays_safe():
    with pytest.raises(RecipeError, match="not valid YAML"):
        read_yaml("a: !!python/object/apply:os.system ['echo hi']\n", "r.yaml")


# --------------------------------------------------------------------------
# the rule, for any nesting

Tree = list[tuple[str, Union[int, "Tree"]]]

trees: st.SearchStrategy[Any] = st.recursive(
    st.integers(-5, 5),
    lambda inner: st.lists(st.tuples(st.sampled_from("abck"), inner), min_size=1, max_size=4),
    max_leaves=12,
)


def emit(pairs: Tree, indent: int, lines: list[str], duplicates: set[tuple[str, int]]) -> None:
    """Block YAML of ``pairs`` (a key may repeat); records (key, line) of every repeated occurrence."""
    seen = set()
    for key, value in pairs:
        lines.append(f"{' ' * indent}{key}:" + ("" if isinstance(value, list) else f" {value}"))
        if key in seen:
            duplicates.add((key, len(lines)))
        seen.add(key)
        if isinstance(value, list):
            emit(value, indent + 2, lines, duplicates)


def as_dict(pairs: Tree) -> dict[str, Any]:
    return {key: as_dict(value) if isinstance(value, list) else value for key, value in pairs}


@given(tree=trees.filter(lambda t: isinstance(t, list)))
def test_any_mapping_at_any_depth_is_refused_exactly_when_it_repeats_a_key(tree):
    lines: list[str] = []
    duplicates: set[tuple[str, int]] = set()
    emit(tree, 0, lines, duplicates)
    text = "\n".join(lines) + "\n"
    if not duplicates:
        assert read_yaml(text, "t.yaml") == as_dict(tree)
        return
    with pytest.raises(RecipeError) as caught:
        read_yaml(text, "t.yaml")
    message = str(caught.value)
    assert any(f"t.yaml line {line}: the key {key!r} appears twice" in message for key, line in duplicates), message


# --------------------------------------------------------------------------
# JSON written by hand on the command line


def test_cli_json_values_refuse_a_key_named_twice():
    result = CliRunner().invoke(main, ["run", "lexical", "--corpus", "no-such-corpus", "-q", "x",
                                       "--set", 'filter={"owner": "ann", "tags": {"in": ["a"], "in": ["b"]}}'])
    assert result.exit_code == 2, result.output
    assert "--set filter: the key 'in' appears twice in one object" in result.output
    result = CliRunner().invoke(main, ["demo", "--filter", '{"owner": "ann", "owner": "bob"}'])
    assert result.exit_code == 2, result.output
    assert "--filter: the key 'owner' appears twice in one object" in result.output
    assert parse_sets(None, None, ['filter={"owner": "ann", "lang": "py"}']) == {"filter": {"owner": "ann", "lang": "py"}}


@given(keys=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=5), nested=st.booleans())
def test_a_json_object_is_refused_exactly_when_it_repeats_a_key(keys, nested):
    body = "{" + ", ".join(f'"{k}": {i}' for i, k in enumerate(keys)) + "}"
    text = f'{{"outer": {body}}}' if nested else body
    if len(set(keys)) == len(keys):
        expected = {k: i for i, k in enumerate(keys)}
        assert loads_json(text, "--set x", unique_keys=True) == ({"outer": expected} if nested else expected)
        return
    with pytest.raises(InputError, match="--set x: the key '[abc]' appears twice in one object"):
        loads_json(text, "--set x", unique_keys=True)
    assert isinstance(loads_json(text, "x"), dict)  # data files keep JSON's rule (the last value wins)
