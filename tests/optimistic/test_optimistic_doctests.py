"""The examples in the docstrings run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["optimistic", "optimistic.order", "optimistic.stages", "optimistic.barrier", "optimistic.local",
           "optimistic.workload"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
