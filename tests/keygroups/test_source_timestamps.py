"""The source's timestamps in the pandas steps of a pipeline (``keygroups.spark_steps``): passed as
microseconds, seen by Python routers and ``Computed`` inputs as datetimes naive in the session
time zone (as Spark hands timestamps to pandas), with the end-of-input punctuation (9999-12-31,
beyond pandas' nanoseconds) and nulls as NaT."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dataflow_kafka.datasource.kafka_read import MAX_EVENT_MS
from dataflow_kafka.keygroups.spark_steps import _datetimes

T_US = 1_795_770_000_000_000                      # 2026-11-27 09:00 UTC


def test_microseconds_become_datetimes_with_nulls_and_the_end_of_input_as_nat():
    # nullable integers with repeats, as Arrow hands a column with nulls to pandas
    us = pd.array([T_US, None, MAX_EVENT_MS * 1000, T_US, None, T_US + 1] * 30, dtype="Int64")
    got = _datetimes(pd.DataFrame({"event_time": us, "other": np.arange(len(us))}), ["event_time"], "UTC")
    want = [pd.Timestamp("2026-11-27 09:00:00"), pd.NaT, pd.NaT, pd.Timestamp("2026-11-27 09:00:00"), pd.NaT,
            pd.Timestamp("2026-11-27 09:00:00.000001")] * 30
    assert got["event_time"].tolist() == want
    assert got["other"].tolist() == list(range(len(us)))


def test_datetimes_are_naive_in_the_session_time_zone():
    got = _datetimes(pd.DataFrame({"t": np.array([T_US], "int64")}), ["t"], "America/New_York")
    assert got["t"].tolist() == [pd.Timestamp("2026-11-27 04:00:00")]
