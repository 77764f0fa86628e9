"""Recipe files: TOML and YAML text to plain data and back, safely and within limits.

Reading: TOML with ``tomllib``; YAML with a *safe* loader that also refuses
anchors and aliases (how a 1 KB file becomes gigabytes) and limits nesting
to :data:`irflow.util.fileio.MAX_NESTING` levels.  Writing: the canonical
dict of a recipe (:meth:`irflow.engine.model.RecipeSpec.to_dict`) as a TOML
file with one table per stage, or as block YAML; a value a file cannot hold
(a Python callable, a None in TOML) is refused naming its path.  Every
problem is a :class:`~irflow.errors.RecipeError` naming the source.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import tomli_w
import yaml

from irflow.errors import RecipeError
from irflow.util.fileio import MAX_NESTING, too_many_digits, write_atomic

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["TOP_KEYS", "read_toml", "read_yaml", "dump_toml", "dump_yaml", "write_recipe_file", "file_error"]

#: The top-level tables of a recipe, in the order files write them.
TOP_KEYS = ("recipe", "params", "choices", "derived", "stages")


def file_error(source: str) -> Callable[[str], RecipeError]:
    """An error factory for :mod:`irflow.util.fileio`: its messages as a RecipeError about ``source``."""
    return lambda message: RecipeError(message, source=source)


# --------------------------------------------------------------------------
# reading


def read_toml(text: str, source: str) -> Any:
    """The data of TOML ``text`` (a RecipeError naming ``source`` when it is not valid TOML)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise RecipeError(f"{source}: not valid TOML: {error}", source=source) from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise RecipeError(f"{source}: not valid TOML: nested too deeply; the limit is {MAX_NESTING} levels "
                          "(flatten the value)", source=source) from None
    except ValueError:  # an integer beyond Python's digit limit
        raise RecipeError(f"{source}: not valid TOML: {too_many_digits()}", source=source) from None


class _RecipeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing anchors and aliases and limiting nesting."""

    recipe_source = "<yaml>"
    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # unannotated in PyYAML's stubs
        line = event.start_mark.line + 1 if event.start_mark is not None else "?"
        where = f"{self.recipe_source} line {line}"
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            mark = f"*{event.anchor}" if isinstance(event, yaml.AliasEvent) else f"&{event.anchor}"
            raise RecipeError(f"{where}: YAML anchors and aliases ({mark}) are not allowed in recipe files; "
                              "write the value out where it is used (a recipe rarely repeats one, and "
                              "expanding aliases is how a small file becomes gigabytes)",
                              source=self.recipe_source)
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                raise RecipeError(f"{where}: nested more than {MAX_NESTING} levels deep, the limit "
                                  "(flatten the value)", source=self.recipe_source)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        # PyYAML keeps the last of two equal keys without a word (k: 10, then k: 11 -> 11); TOML refuses
        # them, and so do recipes in YAML, at every level (every mapping is constructed here)
        if isinstance(node, yaml.MappingNode):
            self._refuse_duplicate_keys(node)
        return super().construct_mapping(node, deep=deep)

    def _refuse_duplicate_keys(self, node: yaml.MappingNode) -> None:
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: {...}``: its keys may be overridden, by YAML's rule
                merged = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for part in merged:
                    if isinstance(part, yaml.MappingNode):
                        self._refuse_duplicate_keys(part)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # a list or mapping as a key: the safe constructor refuses it as unhashable
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # unhashable: the safe constructor says so
                continue
            if first is None:
                seen[key] = line
            else:
                raise RecipeError(f"{self.recipe_source} line {line}: the key {key!r} appears twice in one mapping "
                                  f"(first at line {first}); YAML would keep only the last value — remove one",
                                  source=self.recipe_source)


def read_yaml(text: str, source: str) -> Mapping[str, Any]:
    """The mapping of YAML ``text`` (a safe loader: YAML can never build Python objects here)."""
    loader = _RecipeLoader(text)
    loader.recipe_source = source
    try:
        data = loader.get_single_data()
    except RecipeError:  # an alias, an anchor, too deep: the loader's own words
        raise
    except yaml.YAMLError as error:
        raise RecipeError(f"{source}: not valid YAML: {error}", source=source) from None
    except RecursionError:
        raise RecipeError(f"{source}: not valid YAML: nested too deeply; the limit is {MAX_NESTING} levels "
                          "(flatten the value)", source=source) from None
    except ValueError as error:  # a constructor refused a scalar: an integer beyond Python's digit limit...
        reason = too_many_digits() if "digits" in str(error) else str(error)
        raise RecipeError(f"{source}: not valid YAML: {reason}", source=source) from None
    finally:
        loader.dispose()
    if not isinstance(data, Mapping):
        raise RecipeError(f"{source}: a recipe file must hold a mapping with the keys "
                          f"{', '.join(TOP_KEYS)}; got {type(data).__name__}", source=source)
    return data


# --------------------------------------------------------------------------
# writing


def dump_yaml(data: Mapping[str, Any], source: str) -> str:
    """YAML text of a recipe's canonical dict."""
    _check_dumpable(source, data, "YAML", allow_none=True)
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


def dump_toml(data: Mapping[str, Any], source: str) -> str:
    """TOML text of a recipe's canonical dict: [recipe], [params], [choices], [derived.*], [stages.*].

    None-default params go to ``[recipe] null_params`` (TOML has no null).
    """
    data = dict(data)
    params = data.get("params", {})
    nulls = [name for name, value in params.items() if value is None]
    if nulls:
        data["recipe"] = {**data["recipe"], "null_params": nulls}
        data["params"] = {k: v for k, v in params.items() if v is not None}
    _check_dumpable(source, data, "TOML", allow_none=False)
    lines: list[str] = []
    lines.append("[recipe]")
    lines.extend(_toml_pairs(data["recipe"]))
    for table in ("params", "choices"):
        if data.get(table):
            lines.extend(["", f"[{table}]"])
            lines.extend(_toml_pairs(data[table]))
    for group in ("derived", "stages"):
        for name, body in data.get(group, {}).items():
            lines.extend(["", f"[{group}.{_toml_key(name)}]"])
            lines.extend(_toml_pairs(body))
    return "\n".join(lines) + "\n"


def write_recipe_file(path: Path, text: str) -> Path:
    """Write a recipe file atomically: never a half-written recipe over a good one."""
    return write_atomic(path, text, "recipe file")


def _check_dumpable(source: str, data: Any, fmt: str, *, allow_none: bool) -> None:
    problems: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    problems.append(f"{source}: {path} has a non-string key {key!r}; {fmt} keys are strings")
                walk(item, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")
        elif value is None:
            if not allow_none:
                problems.append(f"{source}: {path} is None, which TOML cannot hold (it has no null); "
                                "leave the key out, or write the recipe as YAML")
        elif isinstance(value, (str, bool, int, float)):
            return
        elif callable(value):
            problems.append(f"{source}: {path} holds the Python object {value!r}, which a recipe file "
                            f"cannot name; register it with irflow.registry.register('<name>', obj) and use "
                            "the name instead")
        else:
            problems.append(f"{source}: {path} holds a {type(value).__name__}, which {fmt} cannot hold; "
                            "use strings, numbers, booleans, lists and tables")

    walk(data, "")
    if problems:
        raise RecipeError(problems, source=source)


class _Dumper(yaml.SafeDumper):
    """A SafeDumper writing tables as blocks and lists of scalars inline (``inputs: [a, b]``)."""


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> Any:
    flow = all(not isinstance(v, (dict, list)) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


def _represent_dict(dumper: yaml.SafeDumper, data: dict[str, Any]) -> Any:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=False)


def _represent_str(dumper: yaml.SafeDumper, data: str) -> Any:
    # NEL and the Unicode line/paragraph separators are line breaks to a YAML reader: escape them
    style = '"' if any(c in data for c in "\x85\u2028\u2029") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _represent_str)
_Dumper.add_representer(list, _represent_list)
_Dumper.add_representer(dict, _represent_dict)


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+\Z")


def _toml_key(key: str) -> str:
    if _BARE_KEY.match(key):
        return key
    return tomli_w.dumps({key: 0})[: -len(" = 0\n")]


def _toml_value(value: Any) -> str:
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return tomli_w.dumps({"x": value})[len("x = "):-1]


def _toml_pairs(table: Mapping[str, Any]) -> list[str]:
    return [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]
