"""The inverted-index workload: Zipf-distributed synthetic words, splitting, posting lists."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from dataflow_kafka.optimistic import Item, StatefulMap
from dataflow_kafka.optimistic.workload import (
    document_arrivals,
    generate_documents,
    inverted_index_stages,
    split_document,
    synthetic_vocabulary,
    update_postings,
)


def test_word_frequencies_follow_zipf():
    docs = generate_documents(400, vocabulary_size=2_000, words_per_doc=(50, 150), seed=11)
    counts = Counter(w for _, text in docs for w in text.split())
    freq = np.array(sorted(counts.values(), reverse=True)[:200], dtype=float)
    slope = np.polyfit(np.log(np.arange(1, 201)), np.log(freq), 1)[0]
    assert -1.15 < slope < -0.85, slope
    assert counts.most_common(1)[0][0] == synthetic_vocabulary(2_000, 11)[0]


def test_generation_is_seeded():
    assert generate_documents(5, vocabulary_size=100, seed=2) == generate_documents(5, vocabulary_size=100, seed=2)
    assert generate_documents(5, vocabulary_size=100, seed=2) != generate_documents(5, vocabulary_size=100, seed=3)
    assert len(set(synthetic_vocabulary(500))) == 500


def test_arrivals_have_exponential_gaps_equal_timestamps_and_per_partition_offsets():
    docs = generate_documents(300, vocabulary_size=50, words_per_doc=(1, 2))
    arrivals = document_arrivals(docs, partitions=3, mean_gap_ms=1.0, seed=4)
    times = [a[0] for a in arrivals]
    assert times == sorted(times) and len(set(times)) < len(times)
    assert 0.7 < (times[-1] - times[0]) / len(times) < 1.3
    for p in range(3):
        assert [a[2] for a in arrivals if a[1] == p] == list(range(sum(a[1] == p for a in arrivals)))


def test_split_document_gives_positions_in_first_occurrence_order():
    assert split_document((3, "b a b c a")) == [("b", 3, (0, 2)), ("a", 3, (1, 4)), ("c", 3, (3,))]


def test_posting_list_change_log_under_a_late_document():
    stage = StatefulMap(update_postings, key=lambda p: p[0], initial=())
    state = stage.open_state()
    stage.process(state, [Item.source(10, 0, 0, ("w", 1, (0,))), Item.source(30, 0, 1, ("w", 3, (2,)))])
    out = stage.process(state, [Item.source(20, 0, 2, ("w", 2, (5,)))])
    assert sorted((i.payload, i.tombstone) for i in out) == [
        (("add", "w", 2, (5,), 2), False),
        (("add", "w", 3, (2,), 2), True),
        (("add", "w", 3, (2,), 3), False),
    ]
    assert state.entry_count() == 3


@pytest.mark.parametrize("bad", [0, 4])
def test_stage_count_is_validated(bad):
    with pytest.raises(ValueError, match=f"got {bad}"):
        inverted_index_stages(bad)
