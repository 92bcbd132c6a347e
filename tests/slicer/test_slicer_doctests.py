"""The runnable examples in the slicer docstrings."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["dataflow_kafka.slicer", "dataflow_kafka.slicer.operator", "dataflow_kafka.slicer.windows", "dataflow_kafka.slicer.compile", "dataflow_kafka.slicer.context_windows",
                                  "dataflow_kafka.slicer.frames", "dataflow_kafka.slicer.lateness"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
