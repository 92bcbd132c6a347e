"""A key group's state with its stages' append-only parts in a log beside the value (the Spark
processor's map state, ``keygroups.operator.StateLog``, a new one per call as a task's map state)
against the state all in the value: the same rows every batch, including a window query added halfway (computed from the Dataflow
stage's element history), when any batch is first run and thrown away (a failed attempt: its
value and log writes discarded, the next attempt reads the committed ones, not the process's
cached state), over 1-3 key groups; the value written with a log stays small."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pandas.testing import assert_frame_equal

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.frames import run_chain_local
from dataflow_kafka.keygroups.operator import StateLog, load_operator_state
from dataflow_kafka.errors import InvalidArgumentError
from tests.suite import examples
from tests.watermarks.test_dataflow_stage import _batches, _stage

pytestmark = pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped")


class _CallLog(StateLog):
    """A log as one call sees it (on Spark a map state handle of one task): closed once the next
    call has its own, so a stage that kept it to read later fails."""

    closed = False

    def read(self):
        assert not self.closed, "a log of an earlier call was read"
        return super().read()


def _next_call(logs: dict) -> None:
    for kg, log in logs.items():
        logs[kg] = _CallLog(log.read())
        log.closed = True


def _specs(n: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Pipeline([_stage(n)]).bound_specs({"k": "string", "v": "bigint"})


@settings(max_examples=examples(20), deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 3), failed=st.sets(st.integers(0, 7)))
def test_a_log_beside_the_value_gives_the_rows_of_the_value_alone(seed, n, failed):
    batches = _batches(seed, 8)
    specs = _specs(n)
    whole: list[dict] = [{}]
    value: list[dict] = [{}]
    logs: list[dict] = [{}]
    for b, frame in enumerate(batches):
        expected = run_chain_local(frame, specs, whole)
        if b in failed:                   # an attempt thrown away: its value and log writes never committed
            run_chain_local(frame, specs, [dict(value[0])],
                            logs=[{kg: StateLog(log.read()) for kg, log in logs[0].items()}])
        _next_call(logs[0])
        got = run_chain_local(frame, specs, value, logs=logs)
        assert_frame_equal(got.reset_index(drop=True), expected.reset_index(drop=True))
    for kg, blob in value[0].items():
        logged = load_operator_state(specs[0], blob, logs[0][kg]).states[0]
        plain = load_operator_state(specs[0], whole[0][kg]).states[0]
        assert logged.history() == plain.history() and logged.query_ids == plain.query_ids


def test_the_value_leaves_the_history_to_the_log_and_needs_it():
    batches = _batches(7, 8)
    specs = _specs(1)
    whole: list[dict] = [{}]
    value: list[dict] = [{}]
    logs: list[dict] = [{}]
    for frame in batches:
        run_chain_local(frame, specs, whole)
        run_chain_local(frame, specs, value, logs=logs)
    held = sum(len(e) for e in load_operator_state(specs[0], whole[0][0]).states[0].history().values())
    assert held > 10
    assert len(value[0][0]) < len(whole[0][0]) - 5 * held        # at least the elements' values and times
    with pytest.raises(InvalidArgumentError, match="log"):
        load_operator_state(specs[0], value[0][0])
