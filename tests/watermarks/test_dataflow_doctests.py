"""The runnable examples in the Dataflow engine's docstrings."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["watermarks.driver", "watermarks.windows", "watermarks.transcript",
                                  "watermarks.multi"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
