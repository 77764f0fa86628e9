"""The import graph of irflow/ (+ stages/, recipes/) follows the layers of ARCHITECTURE.md.

Built from the source with ``ast`` (nothing is imported) and held in networkx:

- no import circle between modules (type-only imports under ``if TYPE_CHECKING:`` excluded: they
  never run);
- every import edge is allowed by the layer map below — imports run one way, from the command
  line down to the kernels — type-only imports included;
- no irflow module is imported inside a function (an import hidden in a function is how a
  circle is dodged), and a third-party module only when it is an optional heavy dependency of
  :data:`LAZY_OK` (a lazy import keeps ``import irflow`` from loading a model runtime);
- a module never imports its own package's ``__init__`` (which re-exports that package's
  modules: a circle waiting to happen).

``python tests/test_layering.py DIR`` prints the violations of another checkout (e.g. the commit
before the subpackages: it fails).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import networkx as nx
import pytest

REPO = Path(__file__).resolve().parent.parent

#: Where each import-graph module comes from: folder -> dotted package it is installed as.
SOURCES = {"irflow": "irflow", "stages": "irflow.stages", "recipes": "irflow.recipes"}

#: The layers, by the module-name prefix that selects them (the longest prefix wins), and what
#: each may import besides itself.  Read top-down: cli -> api / evaluation -> engine -> store ->
#: kernels -> util -> errors; shard sits beside the engine; stages and recipes are plugins of the
#: engine that reach a corpus only through the corpus protocol.
LAYERS: dict[str, set[str]] = {
    "irflow.errors": set(),
    "irflow.util": {"irflow.errors"},
    "irflow.kernels": {"irflow.util", "irflow.errors"},
    "irflow.store": {"irflow.kernels", "irflow.util", "irflow.errors"},
    "irflow.engine": {"irflow.store", "irflow.kernels", "irflow.util", "irflow.errors"},
    "irflow.shard": {"irflow.store", "irflow.kernels", "irflow.util", "irflow.errors"},
    "irflow.stages": {"irflow.engine", "irflow.store.protocol", "irflow.store.expansion", "irflow.kernels",
                      "irflow.util", "irflow.errors"},
    "irflow.recipes": {"irflow.engine", "irflow.util", "irflow.errors"},
    "irflow.api": {"irflow.engine", "irflow.store", "irflow.kernels", "irflow.util", "irflow.errors"},
    "irflow.evaluation": {"irflow.engine", "irflow.shard", "irflow.store", "irflow.kernels", "irflow.util",
                          "irflow.errors"},
    "irflow.cli": {"irflow", "irflow.api", "irflow.evaluation", "irflow.engine", "irflow.shard", "irflow.store",
                   "irflow.kernels", "irflow.util", "irflow.errors"},
    "irflow.__main__": {"irflow.cli"},
    # the package's public names: everything but the command line
    "irflow": {"irflow.api", "irflow.evaluation", "irflow.engine", "irflow.shard", "irflow.store",
               "irflow.kernels", "irflow.util", "irflow.errors"},
}

#: Optional heavy dependencies a function may import lazily (what it costs to import them, or that
#: they may be missing, is the reason).  Nothing of irflow is ever imported in a function.
LAZY_OK = frozenset({"onnxruntime", "sentence_transformers", "torch", "transformers", "tokenizers", "ray",
                     "tqdm"})


@attrs.frozen
class Import:
    source: str     # the importing module
    target: str     # the imported module (an irflow module, or a top-level third-party name)
    line: int
    in_function: bool
    type_only: bool


def module_names(root: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module of the import graph under ``root``."""
    out = {}
    for folder, package in SOURCES.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, in_function: bool = False, type_only: bool = False) -> Iterator[tuple[ast.AST, bool, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function, type_only
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _walk(child, True, type_only)
        elif isinstance(child, ast.If) and _is_type_checking(child):
            for stmt in child.body:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), in_function, True)
            for stmt in child.orelse:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), in_function, type_only)
        else:
            yield from _walk(child, in_function, type_only)


def _resolve(name: str, modules: dict[str, Path]) -> str:
    """The longest module of the graph that ``name`` (a dotted import path) starts with."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports(root: Path = REPO) -> list[Import]:
    """Every import statement of the graph's modules, resolved to modules."""
    modules = module_names(root)
    found = []
    for source, path in modules.items():
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node, in_function, type_only in _walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                # "from a import b": b is a module when the graph has a.b, else a name of module a
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                if target == "irflow" or target.startswith("irflow."):
                    target = _resolve(target, modules)
                else:
                    target = target.split(".")[0]
                found.append(Import(source, target, node.lineno, in_function, type_only))
    return list(dict.fromkeys(found))  # "from a import b, c" names module a once


def layer_of(module: str) -> str | None:
    """The layer (a key of :data:`LAYERS`) a module belongs to: its longest matching prefix."""
    best = None
    for prefix in LAYERS:
        # "irflow" is the package's __init__ alone; every other key covers its submodules too
        inside = module == prefix or (prefix != "irflow" and module.startswith(prefix + "."))
        if inside and (best is None or len(prefix) > len(best)):
            best = prefix
    return best


def allowed(source: str, target: str) -> bool:
    """True when module ``source`` may import module ``target`` under the layer map."""
    home = layer_of(source)
    if home is None:
        return False
    if layer_of(target) == home:
        return True
    return any(target == prefix or target.startswith(prefix + ".") for prefix in LAYERS[home])


def graph(found: list[Import]) -> nx.DiGraph:
    """Module -> module edges of the imports that run (irflow modules only, type-only imports left out)."""
    g = nx.DiGraph()
    for imp in found:
        if imp.target.startswith("irflow") and not imp.type_only and imp.target != imp.source:
            g.add_edge(imp.source, imp.target, line=imp.line)
    return g


def violations(root: Path = REPO) -> dict[str, list[str]]:
    """What breaks the rules, by rule (empty lists when the layout is clean)."""
    found = imports(root)
    modules = module_names(root)
    ours = [i for i in found if i.target.startswith("irflow")]
    out: dict[str, list[str]] = {"no layer": [], "upward": [], "cycles": [], "in a function": [], "own package": []}
    for module in modules:
        if layer_of(module) is None:
            out["no layer"].append(module)
    for imp in ours:
        where = f"{imp.source} line {imp.line} imports {imp.target}"
        if imp.target != imp.source and layer_of(imp.source) and not allowed(imp.source, imp.target):
            out["upward"].append(where)
        if imp.in_function:
            out["in a function"].append(where)
        package = imp.source.rpartition(".")[0]
        if modules.get(imp.source, Path()).name != "__init__.py" and imp.target == package and package != "irflow":
            out["own package"].append(where)
    for imp in found:
        if imp.in_function and not imp.target.startswith("irflow") and imp.target not in LAZY_OK:
            out["in a function"].append(f"{imp.source} line {imp.line} imports {imp.target} (not an optional "
                                        "heavy dependency: import it at the top of the module)")
    for cycle in sorted(sorted(c) for c in nx.simple_cycles(graph(ours))):
        out["cycles"].append(" -> ".join(cycle))
    return out


@pytest.fixture(scope="module")
def found() -> dict[str, list[str]]:
    return violations()


@pytest.mark.parametrize("rule", ["no layer", "upward", "cycles", "in a function", "own package"])
def test_the_import_graph_follows_the_layers(found: dict[str, list[str]], rule: str) -> None:
    assert found[rule] == [], f"{rule}:\n  " + "\n  ".join(found[rule])


def test_the_graph_is_read_from_the_source() -> None:
    found = imports()
    # a sample of what must be seen for the checks above to mean anything
    pairs = {(i.source, i.target) for i in found}
    assert ("irflow.stages.dense", "irflow.engine") in pairs
    assert ("irflow.api.retrieve", "irflow.engine.recipe") in pairs
    assert any(i.in_function and i.target == "sentence_transformers" for i in found)
    assert len(module_names(REPO)) > 60


def test_the_layer_map_refuses_what_the_architecture_forbids() -> None:
    assert not allowed("irflow.api.retrieve", "irflow.stages.weight")  # the API never reaches into a stage
    assert not allowed("irflow.engine.executor", "irflow.api.retrieve")
    assert not allowed("irflow.store.corpus", "irflow.engine.stage")
    assert not allowed("irflow.engine.executor", "irflow.shard.corpus")
    assert not allowed("irflow.stages.rerank", "irflow.store.corpus")  # stages: the protocol, not the Corpus
    assert not allowed("irflow.kernels.bm25", "irflow.store.records")
    assert allowed("irflow.stages.rerank", "irflow.store.protocol")
    assert allowed("irflow.cli.app", "irflow.evaluation.evaluate")
    assert allowed("irflow.evaluation.evaluate", "irflow.shard.corpus")


def test_architecture_md_maps_every_package_and_readme_links_it() -> None:
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    packages = sorted(p.name for p in (REPO / "irflow").iterdir() if (p / "__init__.py").exists())
    assert packages and all(f"| `{name}/` |" in text for name in packages), packages
    assert all(f"irflow.{name}" in LAYERS for name in packages)
    assert "(ARCHITECTURE.md)" in (REPO / "README.md").read_text(encoding="utf-8")


if __name__ == "__main__":  # python tests/test_layering.py [CHECKOUT]
    checkout = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO
    report = violations(checkout)
    for rule, items in report.items():
        print(f"{rule}: {len(items)}")
        for item in items[:15]:
            print(f"  {item}")
    sys.exit(1 if any(report.values()) else 0)
