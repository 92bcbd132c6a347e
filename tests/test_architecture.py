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

    errors, deprecation, collector < windowing, brokers < datasource < keygroups < slicer, watermarks, optimistic
           < joins, balancing, traces, jvm_ingest, compat < dataflow_kafka (the root's lazy exports
           and the deprecated names' forwards to compat are strings)

Modules talk through public names: no module imports a name with a leading underscore from
another module (a private name crossing a module line means the cut between them is in the
wrong place), and a private module (``watermarks._codec``) is imported only from inside its own
package. In the stage layer (``LISTED_INTERFACES``) a module takes from another only what that
module's ``__all__`` lists.
"""

from __future__ import annotations

import ast
import tomllib
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "dataflow_kafka"

LAYERS: list[tuple[str, ...]] = [
    ("errors", "deprecation", "collector"),
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


@lru_cache(maxsize=1)
def extension_modules() -> frozenset[str]:
    """Dotted names of the package's C extension modules (pyproject's ``ext-modules``): imported
    like any module, with no Python source for these checks to read."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return frozenset(e["name"] for e in config["tool"]["setuptools"].get("ext-modules", []))


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
        if name in modules or name in extension_modules():
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


@lru_cache(maxsize=None)
def parsed(module: str) -> ast.Module:
    """The syntax tree of a library module's file."""
    return ast.parse(library_modules()[module].read_text(), str(library_modules()[module]))


@lru_cache(maxsize=1)
def all_private_imports() -> tuple[tuple[str, int, str], ...]:
    """:func:`private_imports_of` of every library module."""
    return tuple(f for m in library_modules() for f in private_imports_of(m))


def _private_part(module: str) -> str | None:
    """The package a private module or package of ``module``'s path belongs to (``a.b`` for
    ``a.b._c`` or ``a.b._c.d``), or None when no part of the path is private."""
    parts = module.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def private_imports_of(module: str, source: str | None = None) -> list[tuple[str, int, str]]:
    """The imports of ``module`` (its file, or ``source``) that cross a module line privately: a
    name with a leading underscore taken from another library module (not a submodule of it), or a
    private module taken from outside its package; each as ``(module, line, imported name)``."""
    tree = parsed(module) if source is None else ast.parse(source, module)
    modules = library_modules()
    out: list[tuple[str, int, str]] = []

    def outside(target: str) -> bool:
        owner = _private_part(target)
        return owner is not None and not (module == owner or module.startswith(owner + "."))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(module, node.lineno, a.name) for a in node.names
                    if _library_module(a.name) is not None and outside(a.name)]
        elif isinstance(node, ast.ImportFrom) and _library_module(base := _resolve(module, node)) is not None:
            for alias in node.names:
                full = f"{base}.{alias.name}"
                known = full in modules or full in extension_modules()
                if outside(full if known else base) or (
                        not known and base != module
                        and alias.name.startswith("_") and not alias.name.startswith("__")):
                    out.append((module, node.lineno, full))
    return out


#: Private imports left on purpose: ``{(importing module, imported name): why}``.
PRIVATE_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {
    (f"{PACKAGE}.slicer.context_windows", f"{PACKAGE}.slicer.windows._positive_int"):
        "slicer/windows.py is being reworked by the slicer engine's own change (one measure enum, the window "
        "registry); its validation helper gets a public home there",
}


@lru_cache(maxsize=None)
def declared_all(module: str) -> frozenset[str] | None:
    """The names of ``module``'s ``__all__`` (a literal list or tuple), or None without one."""
    for node in parsed(module).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "__all__" and node.value is not None:
            return frozenset(ast.literal_eval(node.value))
    return None


def unlisted_imports_of(module: str, source: str | None = None) -> list[tuple[str, int, str]]:
    """The names ``module`` (its file, or ``source``) takes from another module (not a package's
    ``__init__``) that the latter's ``__all__`` does not list: ``(module, line, imported name)``."""
    modules = library_modules()
    out: list[tuple[str, int, str]] = []
    for node in ast.walk(parsed(module) if source is None else ast.parse(source, module)):
        if isinstance(node, ast.ImportFrom) and (base := _resolve(module, node)) in modules \
                and base != module and not _is_package(base):
            listed = declared_all(base) or frozenset()
            out += [(module, node.lineno, f"{base}.{a.name}") for a in node.names
                    if f"{base}.{a.name}" not in modules and a.name not in listed]
    return out


#: Packages whose modules take from another module only names its ``__all__`` lists.
LISTED_INTERFACES = ("keygroups",)


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
    # a C extension module is a module of the graph too (the source's poll, datasource/_rdcolumns.c)
    assert f"{PACKAGE}.datasource._rdcolumns" in import_graph()[f"{PACKAGE}.datasource.kafka_read"]
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


def test_no_module_imports_a_private_name_of_another():
    found = [f"{m}:{line}: {name}" for m, line, name in all_private_imports()
             if (m, name) not in PRIVATE_IMPORTS_ALLOWED]
    assert not found, ("private names imported across modules (make the name public, in its module's __all__, "
                       "or move the code to where it is used):\n" + "\n".join(found))


def test_every_allowed_private_import_is_still_made():
    made = {(m, name) for m, _, name in all_private_imports()}
    assert set(PRIVATE_IMPORTS_ALLOWED) <= made, f"no longer made, drop: {set(PRIVATE_IMPORTS_ALLOWED) - made}"


def test_modules_of_the_stage_layer_take_only_what_all_lists():
    found = [f"{m}:{line}: {name}" for m in library_modules()
             if any(m.startswith(f"{PACKAGE}.{p}.") for p in LISTED_INTERFACES)
             for m, line, name in unlisted_imports_of(m)]
    assert not found, "names taken from a module whose __all__ does not list them:\n" + "\n".join(found)


def test_the_checks_find_what_they_look_for():
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}
    assert cycles(graph) == [["a", "b", "c"]]
    assert _cycle_path(["a", "b", "c"], graph) == ["a", "b", "c", "a"]
    assert upward_imports({f"{PACKAGE}.keygroups.slots": frozenset({f"{PACKAGE}.balancing.routing_table"}),
                           f"{PACKAGE}.balancing.x": frozenset({f"{PACKAGE}.keygroups"})}) == [
        f"{PACKAGE}.keygroups.slots (layer 3) imports {PACKAGE}.balancing.routing_table (layer 5)"]
    kg, wm = f"{PACKAGE}.keygroups", f"{PACKAGE}.watermarks"
    source = (f"from {kg}.plan import _Link, Chain\n"          # a private name of another module
              f"from .plan import _named\n"                     # ... relative
              f"from {wm} import _codec\n"                      # a private module from outside its package
              f"import {wm}._codec\n"
              f"from {wm}._codec import dumps\n"
              f"from {kg}.pipeline import Pipeline\n"           # public: fine
              f"from {kg} import __doc__\n")                    # a dunder: fine
    assert [(line, name) for _, line, name in private_imports_of(f"{kg}.dag", source)] == [
        (1, f"{kg}.plan._Link"), (2, f"{kg}.plan._named"), (3, f"{wm}._codec"), (4, f"{wm}._codec"),
        (5, f"{wm}._codec.dumps")]
    inside = f"from {wm} import _codec\nfrom . import _codec\nfrom {wm}._codec import dumps\n"
    assert private_imports_of(f"{wm}.driver", inside) == []     # a private module inside its package: fine
    assert "Chain" in declared_all(f"{kg}.plan")
    assert [name for _, _, name in unlisted_imports_of(f"{kg}.dag", f"from {kg}.plan import Chain, IDENT_RE\n"
                                                       f"from {kg} import Pipeline, plan\n")] == [f"{kg}.plan.IDENT_RE"]
