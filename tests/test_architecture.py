"""The library's import structure, read with ``ast`` (no import runs): no cycles, layers in order.

Modules are the installed package's (``dataflow_kafka.<package>.<module>``, found through the
package-dir mapping of ``pyproject.toml``). Every ``import`` and ``from ... import`` counts,
inside functions and ``if TYPE_CHECKING:`` blocks included; relative imports are resolved. An
import names the most specific library module it reaches: ``from dataflow_kafka.keygroups import
stage`` imports ``keygroups.stage``, ``from dataflow_kafka.keygroups import Pipeline`` imports the
package ``keygroups`` (its ``__init__``). A parent package's ``__init__``, which Python runs
before a submodule, is not counted as imported by every importer of the submodule (as
import-linter and pydeps count); a package's own ``__init__`` importing its modules is.

The layers, lowest first; a module may import its own layer and the layers below it::

    errors, deprecation < windowing, brokers < datasource < keygroups < slicer, watermarks, optimistic
           < joins, balancing, traces, jvm_ingest, compat < dataflow_kafka (the root's lazy exports
           and the deprecated names' forwards to compat are strings)
"""

from __future__ import annotations

import ast
import tomllib
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "dataflow_kafka"

LAYERS: list[tuple[str, ...]] = [
    ("errors", "deprecation"),
    ("windowing", "brokers"),
    ("datasource",),
    ("keygroups",),
    ("slicer", "watermarks", "optimistic"),
    ("joins", "balancing", "traces", "jvm_ingest", "compat"),
    ("",),                       # the root package, dataflow_kafka/__init__.py
]
OUTSIDE = ("tests", "bench", "demo")


@lru_cache(maxsize=1)
def library_modules() -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of the installed package."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_dir = config["tool"]["setuptools"]["package-dir"]
    modules: dict[str, Path] = {}
    for package, directory in package_dir.items():
        for path in sorted((ROOT / directory).rglob("*.py")):
            parts = path.relative_to(ROOT / directory).with_suffix("").parts
            if any(p.startswith(".") or p == "__pycache__" for p in parts):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


def _is_package(name: str) -> bool:
    return library_modules()[name].name == "__init__.py"


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` import names (relative ones resolved against ``importer``)."""
    if not node.level:
        return node.module or ""
    base = importer.split(".") if _is_package(importer) else importer.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _library_module(name: str) -> str | None:
    """The most specific library module ``name`` lies in (``a.b.c`` -> ``a.b`` if only that exists)."""
    modules = library_modules()
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str) -> set[str]:
    """Every library module ``module`` imports, anywhere in its file."""
    tree = ast.parse(library_modules()[module].read_text(), str(library_modules()[module]))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node)
            names = [f"{base}.{alias.name}" if alias.name != "*" else base for alias in node.names]
        else:
            continue
        for name in names:
            found = _library_module(name)
            if found is not None and found != module:
                out.add(found)
    return out


def outside_imports_of(module: str) -> set[str]:
    """Top-level names of ``tests``, ``bench`` or ``demo`` that ``module`` imports."""
    tree = ast.parse(library_modules()[module].read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        out |= {n.split(".")[0] for n in names if n.split(".")[0] in OUTSIDE}
    return out


@lru_cache(maxsize=1)
def import_graph() -> dict[str, frozenset[str]]:
    return {m: frozenset(imports_of(m)) for m in library_modules()}


def cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _cycle_path(component: list[str], graph: dict[str, frozenset[str]]) -> list[str]:
    """One cycle through the component's first module, for the failure message."""
    start = component[0]
    members = set(component)
    path, seen = [start], {start}

    def walk(v: str) -> bool:
        for w in sorted(graph[v] & members):
            if w == start and len(path) > 1:
                path.append(w)
                return True
            if w not in seen:
                seen.add(w)
                path.append(w)
                if walk(w):
                    return True
                path.pop()
        return False

    walk(start)
    return path


def layer_of(module: str) -> int:
    """The layer index of a library module (its first package under ``dataflow_kafka``)."""
    top = module.split(".")[1] if module.count(".") >= 1 else ""
    for i, packages in enumerate(LAYERS):
        if top in packages:
            return i
    raise AssertionError(f"{module}: package {top!r} is in no layer of tests/test_architecture.py's LAYERS")


def upward_imports(graph: dict[str, frozenset[str]]) -> list[str]:
    return sorted(f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
                  for m, targets in graph.items() for t in targets if layer_of(t) > layer_of(m))


# -- the checks -----------------------------------------------------------------------------------------

def test_the_graph_sees_the_library():
    modules = library_modules()
    assert f"{PACKAGE}.keygroups.stage" in modules and f"{PACKAGE}.errors" in modules
    # a function-level import counts (processor imports operator inside handleInputRows)
    assert f"{PACKAGE}.keygroups.operator" in import_graph()[f"{PACKAGE}.keygroups.processor"]
    for m in modules:
        layer_of(m)


def test_no_import_cycles():
    graph = import_graph()
    found = [" -> ".join(_cycle_path(c, graph)) + f"   (component: {', '.join(c)})" for c in cycles(graph)]
    assert not found, "import cycles:\n" + "\n".join(found)


def test_no_import_from_a_lower_layer_to_a_higher_one():
    found = upward_imports(import_graph())
    assert not found, "imports up a layer:\n" + "\n".join(found)


def test_the_library_imports_no_tests_bench_or_demo():
    found = sorted(f"{m} imports {', '.join(sorted(o))}" for m in library_modules()
                   if (o := outside_imports_of(m)))
    assert not found, "\n".join(found)


def test_the_checks_find_what_they_look_for():
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}
    assert cycles(graph) == [["a", "b", "c"]]
    assert _cycle_path(["a", "b", "c"], graph) == ["a", "b", "c", "a"]
    assert upward_imports({f"{PACKAGE}.keygroups.slots": frozenset({f"{PACKAGE}.balancing.routing_table"}),
                           f"{PACKAGE}.balancing.x": frozenset({f"{PACKAGE}.keygroups"})}) == [
        f"{PACKAGE}.keygroups.slots (layer 3) imports {PACKAGE}.balancing.routing_table (layer 5)"]
