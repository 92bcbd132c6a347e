"""The docstring examples of joins/ run as tests."""

import doctest

import pytest

import joins
import joins.interval_join
import joins.stage
import joins.window_join


@pytest.mark.parametrize("module", [joins, joins.window_join, joins.interval_join, joins.stage])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
