"""The runnable examples in the Dataflow engine's docstrings."""

from __future__ import annotations

import doctest
import importlib

import pytest

#: late drops are expected here and counted; the warning itself is tested in test_dataflow_beam_rules.py
pytestmark = pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped")


@pytest.mark.parametrize("name", ["dataflow_kafka.watermarks.driver", "dataflow_kafka.watermarks.windows", "dataflow_kafka.watermarks.transcript",
                                  "dataflow_kafka.watermarks.multi"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
