"""docs/ARCHITECTURE.md's "Adding ..." sections are true to the letter: every file they name
exists, and every symbol they place in a file is in it. (That the named files are the only
edits is shown where it can be: a window of an existing shape, tests/windowing/
test_windowing_registry.py; a component registered in a test run by both kernels, the same
file; a source option's docs table generated from its descriptor, tests/datasource/test_options.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "ARCHITECTURE.md").read_text()


def sections() -> dict[str, str]:
    parts = re.split(r"^## ", PAGE, flags=re.M)
    return {p.split("\n", 1)[0]: p for p in parts if p.startswith("Adding ")}


def named_files(text: str) -> set[str]:
    """Paths in backticks (``slicer/compile.py``), placeholders (``<package>/stage.py``) left out."""
    return {m for m in re.findall(r"`([\w./-]+\.(?:py|md|toml))`", text) if "<" not in m}


def placed_symbols(text: str) -> set[tuple[str, str]]:
    """``(symbol, file)`` written as "`X` in `file`", "`X` (`file`)" or "`file`'s `X`"."""
    pairs = set(re.findall(r"`(\w+)(?:\(\))?` in `([\w/]+\.py)`", text))
    pairs |= set(re.findall(r"`(\w+)(?:\(\))?` \(`([\w/]+\.py)`", text))
    pairs |= {(sym, path) for path, sym in re.findall(r"`([\w/]+\.py)`'s `(\w+)`", text)}
    return pairs


def test_the_sections_are_there():
    assert {"Adding a window type, an aggregation or a component", "Adding a stage",
            "Adding a source option"} <= set(sections())


@pytest.mark.parametrize("title", sorted(sections()))
def test_every_file_an_adding_section_names_exists(title):
    files = named_files(sections()[title])
    assert files, title
    missing = sorted(f for f in files if not (ROOT / f).exists() and not (ROOT / "docs" / f).exists())
    assert not missing, f"{title}: {missing}"


@pytest.mark.parametrize("title", sorted(sections()))
def test_every_symbol_an_adding_section_places_in_a_file_is_there(title):
    prose = "\n".join(line for line in sections()[title].splitlines() if not line.startswith("|"))  # not the
    pairs = placed_symbols(prose)                                                   # table's "before" column
    wrong = sorted((s, f) for s, f in pairs if not re.search(rf"\b{s}\b", (ROOT / f).read_text()))
    assert not wrong, f"{title}: {wrong}"


def test_the_checks_find_what_they_look_for():
    text = "`RUNTIMES` in `slicer/compile.py`, `ContextFreeWindow` (`slicer/windows.py`), `tests/x.py`'s `LAYERS`"
    assert placed_symbols(text) == {("RUNTIMES", "slicer/compile.py"), ("ContextFreeWindow", "slicer/windows.py"),
                                    ("LAYERS", "tests/x.py")}
    assert named_files("`a/b.py`, `<package>/stage.py`, `pyproject.toml`") == {"a/b.py", "pyproject.toml"}
