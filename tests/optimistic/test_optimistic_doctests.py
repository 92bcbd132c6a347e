"""The examples in the docstrings run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["dataflow_kafka.optimistic", "dataflow_kafka.optimistic.order", "dataflow_kafka.optimistic.stages", "dataflow_kafka.optimistic.barrier", "dataflow_kafka.optimistic.local",
           "dataflow_kafka.optimistic.workload"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
