"""The docstring examples of traces/ run as tests."""

import doctest

from dataflow_kafka import traces
def test_package_doctest():
    result = doctest.testmod(traces)
    assert result.attempted > 0 and result.failed == 0
