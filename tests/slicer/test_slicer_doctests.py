"""The runnable examples in the slicer docstrings."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["slicer", "slicer.operator", "slicer.windows", "slicer.compile", "slicer.context_windows",
                                  "slicer.frames", "slicer.lateness"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
