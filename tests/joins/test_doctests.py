"""The docstring examples of joins/ run as tests."""

import doctest

import pytest

from dataflow_kafka import joins
import dataflow_kafka.joins.interval_join  # noqa: F401
from dataflow_kafka import joins
import dataflow_kafka.joins.stage  # noqa: F401
from dataflow_kafka import joins
import dataflow_kafka.joins.window_join  # noqa: F401
from dataflow_kafka import joins
@pytest.mark.parametrize("module", [joins, joins.window_join, joins.interval_join, joins.stage])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
