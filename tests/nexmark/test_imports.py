"""``bench.nexmark`` imports without a circle (read with ``ast``, imports inside functions
counted): the benchmark's entry point, the queries and the harnesses import shared helpers, never
each other back."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_architecture import _cycle_path, cycles

ROOT = Path(__file__).resolve().parents[2]


def nexmark_graph() -> dict[str, frozenset[str]]:
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (ROOT / "bench" / "nexmark").rglob("*.py")}
    graph = {}
    for name, path in files.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found |= {m for m in (node.module, *(f"{node.module}.{a.name}" for a in node.names)) if m in files}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in files}
        graph[name] = frozenset(found - {name})
    return graph


def test_bench_nexmark_has_no_import_circle():
    graph = nexmark_graph()
    assert "bench.nexmark.__main__" in graph and "bench.nexmark.queries.q8" in graph
    found = [" -> ".join(_cycle_path(c, graph)) for c in cycles(graph)]
    assert not found, "import circles in bench.nexmark:\n" + "\n".join(found)
