"""The local runner: input validation, counters, garbage collection."""

from __future__ import annotations

import pytest

from dataflow_kafka.optimistic import Grouping, Map, StatefulMap, run_buffered, run_local, safe_punctuations
from dataflow_kafka.optimistic.workload import document_arrivals, generate_documents, inverted_index_stages


def parity(x: int) -> int:
    return x % 2


def total(state: int, x: int) -> tuple[int, list[int]]:
    return state + x, [state + x]


def test_broken_punctuation_is_rejected_with_the_arrival_that_breaks_it():
    arrivals = [(5, 0, 0, "a"), (3, 0, 1, "b")]
    with pytest.raises(ValueError, match=r"after=1, bound_ms=4.*arrival 1 with event time 3"):
        run_local([Map(lambda x: [x])], arrivals, [(1, 4)])


def test_duplicate_source_offset_is_rejected():
    with pytest.raises(ValueError, match=r"\(0, 7\) occurs twice"):
        run_local([], [(1, 0, 7, "a"), (2, 0, 7, "b")])


def test_mode_is_parsed_with_a_message_naming_the_choices():
    with pytest.raises(ValueError, match=r"'optimistic', 'buffered'.*'fast'"):
        run_local([], [], mode="fast")


def test_safe_punctuations_are_the_least_time_to_come():
    arrivals = [(5, 0, 0, 0), (3, 0, 1, 0), (4, 0, 2, 0), (9, 0, 3, 0)]
    assert safe_punctuations(arrivals, 1) == [(1, 3), (2, 4), (3, 9)]


def test_in_order_input_has_no_replay_and_releases_each_punctuation():
    arrivals = [(t, 0, t, t) for t in range(10)]
    r = run_local([StatefulMap(total, key=parity, initial=0)], arrivals, safe_punctuations(arrivals))
    assert (r.tombstones_in, r.replay_ratio, r.release_lag_max) == (0, 1.0, 0)
    assert r.max_buffer == 1


def test_gc_bounds_the_state_and_keeps_the_output():
    stages = inverted_index_stages(2)
    docs = generate_documents(60, vocabulary_size=80, words_per_doc=(3, 6), seed=3)
    arrivals = document_arrivals(docs, partitions=2, mean_gap_ms=3.0, seed=3)
    punctuations = safe_punctuations(arrivals, 5)
    kept = run_local(stages, arrivals, punctuations, gc=False, flush=False)
    collected = run_local(stages, arrivals, punctuations, flush=False)
    assert collected.released == kept.released
    assert collected.final_state_entries < kept.final_state_entries / 10
    assert collected.max_state_entries < kept.max_state_entries


def test_buffered_baseline_buffers_before_each_order_sensitive_stage():
    stages = [Map(lambda x: [x]), Grouping(window=2, key=parity), Map(lambda g: [sum(g)]),
              StatefulMap(total, key=parity, initial=0)]
    arrivals = [(t, 0, t, t) for t in (2, 0, 1, 3)]
    b = run_buffered(stages, arrivals, safe_punctuations(arrivals, 2))
    o = run_local(stages, arrivals, safe_punctuations(arrivals, 2))
    assert b.buffering_stages == 2 and o.buffering_stages == 1
    assert b.released == o.released
    assert [i.payload for i in b.released] == [0, 1, 2, 6]
