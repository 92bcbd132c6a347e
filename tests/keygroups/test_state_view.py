"""keygroups.state_view without Spark: the worked example's state per key against brute force, a
fused operator's per-stage watermarks, the default description, the detail text's round trip, and
errors that name the stage or operator."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from dataflow_kafka.errors import InvalidArgumentError
from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.examples import RunningCount
from dataflow_kafka.keygroups.state_view import local_state, state_item
from tests.keygroups.test_examples import _batches
from tests.keygroups.toy_stages import TumblingCount


@pytest.mark.parametrize("seed", range(4))
def test_running_count_state_is_the_count_per_key(seed):
    rnd = random.Random(seed)
    records = [(None if rnd.random() < 0.05 else rnd.choice("abcdefg"), rnd.randint(0, 5_000)) for _ in range(60)]
    cuts = sorted(rnd.sample(range(1, len(records)), 3))
    reset_at = rnd.choice([None, 1])
    start = cuts[0] if reset_at == 1 else 0
    want = Counter(k for k, _ in records[start:] if k is not None)
    for n in (1, 3):
        stage = RunningCount(num_key_groups=n)
        states: dict = {}
        Pipeline([stage]).run_local(_batches(records, cuts, reset_at), states=states)
        view = local_state(Pipeline([stage]), states)
        counts = view.items[view.items["item"] == "count"]
        assert dict(zip(counts["key"], counts["count"])) == want
        assert len(set(counts["key_group"])) <= n and counts["key"].is_unique
        marks = view.watermarks
        assert (marks["watermark_in_ms"] == max(t for _, t in records)).all()
        assert (marks["watermark_out_ms"] == marks["watermark_in_ms"]).all()
        assert set(marks["senders"].map(lambda s: tuple(s))) == {("t-0",)}


def test_a_fused_operator_shows_each_stage_and_the_default_description():
    """``TumblingCount`` keeps the default ``describe_state`` (its state's repr); fused after
    ``RunningCount`` on the same key, both stages share one operator and one key group state."""
    first, second = RunningCount(key="k", num_key_groups=2, name="counts"), TumblingCount(key="key", value="count",
                                                                                        num_key_groups=2, name="tc")
    pipe = Pipeline([first, second])
    assert len(pipe.plan()) == 1
    records = [("a", 100), ("b", 1_500), ("a", 2_600), ("c", 900)]
    frames = _batches(records, [2])
    for f in frames:
        f["k"] = f.get("key")
    states: dict = {}
    pipe.run_local(frames, states=states)
    view = local_state(pipe, states)
    assert set(view.items["operator"]) == {"counts > tc"} and set(view.watermarks["stage"]) == {"counts", "tc"}
    default = view.of("tc")
    assert set(default["item"]) == {"state"} and default["detail"].str.startswith("state={'weight': 1").all()
    assert [s["weight"] for s in view.table("tc", "state")["state"]] == [1, 1]     # the state itself, typed
    per_group = view.watermarks.groupby("key_group")
    for _, m in per_group:                          # the second stage's input is the first's output watermark
        m = m.set_index("stage")
        assert m.loc["tc", "watermark_in_ms"] == m.loc["counts", "watermark_out_ms"]
        assert m.loc["tc", "senders"] is None and m.loc["counts", "senders"] == {"t-0": 2_600}


@dataclass
class _Described(RunningCount):
    """Describes every key twice: as a dict row and in a frame, with typed detail fields."""

    def describe_state(self, state):
        import pandas as pd

        rows = [state_item("held", key=k, start_ms=np.int64(5), count=n, payload=("a; b", 1), n=3.0, skipped=None,
                           big="x" * 500) for k, n in state.items()]
        frame = pd.DataFrame({"item": "framed", "key": list(state), "count": list(state.values()),
                              "ratio": [0.5] * len(state), "flag": [True] * len(state)})
        return pd.concat([pd.DataFrame.from_records(rows), frame], ignore_index=True)


def test_detail_text_is_bounded_and_fields_stay_typed():
    row = state_item("held", key="k", start_ms=np.int64(5), count=2, payload=("a", 1), skipped=None)
    assert row == {"item": "held", "key": "k", "query_id": None, "start_ms": 5, "end_ms": None, "count": 2,
                   "payload": ("a", 1)}
    stage = _Described(name="d")
    states: dict = {}
    Pipeline([stage]).run_local(_batches([("a", 1), ("b", 2), ("a", 3)], []), states=states)
    view = local_state(Pipeline([stage]), states)
    held = view.of("d", "held").sort_values("key")
    assert held["detail"].tolist() == ["payload=('a; b', 1); n=3; big=" + "x" * 197 + "..."] * 2
    assert held["count"].tolist() == [2, 1] and held["start_ms"].tolist() == [5, 5]
    typed = view.table("d", "held")
    assert typed["payload"].tolist() == [("a; b", 1)] * 2 and typed["big"].str.len().tolist() == [500, 500]
    assert "ratio" not in typed and set(view.table("d", "framed")["ratio"]) == {0.5}
    assert view.of("d", "framed")["detail"].tolist() == ["ratio=0.5; flag=True"] * 2


@dataclass
class _BadDescription(RunningCount):
    def describe_state(self, state):
        return [{"item": "count", "stage": "red"}]


def test_a_description_with_unknown_fields_names_the_stage():
    stage = _BadDescription(name="bad")
    states: dict = {}
    Pipeline([stage]).run_local(_batches([("a", 1)], []), states=states)
    with pytest.raises(InvalidArgumentError, match=r"stage 'bad': describe_state gave fields \['stage'\]"):
        local_state(Pipeline([stage]), states)


def test_states_of_another_pipeline_are_refused():
    states: dict = {}
    Pipeline([RunningCount(name="one")]).run_local(_batches([("a", 1)], []), states=states)
    with pytest.raises(InvalidArgumentError, match=r"operators \['one'\] are not this pipeline's"):
        local_state(Pipeline([RunningCount(name="two")]), states)
