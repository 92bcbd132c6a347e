"""The IoT pipeline of data-trace types Example 4.1 / Table 2: parse, interpolate, aggregate.

``joinFilterMap`` (OpStateless) keeps the sensors near windows and re-keys by sensor;
``linearInterpolation`` (OpKeyedOrdered, after SORT) fills the missing points of each sensor;
``ToHome`` (OpStateless) re-keys by home; ``maxOfAvgPerID`` (OpKeyedUnordered) reports per home,
at every marker, the maximum over blocks of the block's average (sums kept as exact fractions:
``combine`` must be associative, and float addition is not; the parallel run caught it).

Records: key = sensor id (str), value = ``{"id", "scalar", "ts"}`` (ts in time units of ``step``).

Run on the embedded broker (``python -m dataflow_kafka.traces.examples.iot``): produces a few readings to a topic,
runs the DAG on Spark with ``format("dataflow-kafka")`` and prints the per-home maxima next to
``run_local``'s.
"""

from __future__ import annotations

from fractions import Fraction

from dataflow_kafka.traces import Dag, O, OpKeyedOrdered, OpKeyedUnordered, OpStateless, U

__all__ = ["JoinFilterMap", "LinearInterpolation", "ToHome", "MaxOfAvgPerID", "build", "LOCATION", "HOME"]

#: sensor -> location (the table JFM joins with) and sensor -> home
LOCATION = {"s1": "window", "s2": "window", "s3": "door", "s4": "window"}
HOME = {"s1": "h1", "s2": "h1", "s3": "h2", "s4": "h2"}


class JoinFilterMap(OpStateless):
    """``U(Ut, M) -> U(ID, V)``: keep sensors near windows; emit ``(id, (scalar, ts))``."""

    input = U(None, "M")
    output = U("ID", "V")

    def __init__(self, location: dict | None = None) -> None:
        self.location = LOCATION if location is None else location

    def on_item(self, key, value, emit):
        if self.location.get(value["id"]) == "window":
            emit(value["id"], (float(value["scalar"]), int(value["ts"])))


class LinearInterpolation(OpKeyedOrdered):
    """``O(ID, V) -> O(ID, V)``: Table 2's linearInterpolation (items in timestamp order)."""

    input = O("ID", "V")
    output = O("ID", "V")

    def __init__(self, step: int = 1) -> None:
        self.step = step

    def initial_state(self):
        return None

    def on_item(self, state, key, value, emit):
        if state is None:
            emit(key, value, value[1])
        else:
            x, t0 = state
            dt = (value[1] - t0) // self.step
            for i in range(1, dt + 1):
                y = x + i * (value[0] - x) / dt
                emit(key, (y, t0 + i * self.step), t0 + i * self.step)
        return value

    def on_marker(self, state, key, marker, emit):
        return state


class ToHome(OpStateless):
    """``U(ID, V) -> U(Home, V)``: re-key a sensor's value by its home."""

    input = U("ID", "V")
    output = U("Home", "V")

    def __init__(self, home: dict | None = None) -> None:
        self.home = HOME if home is None else home

    def on_item(self, key, value, emit):
        emit(self.home[key], value)


class MaxOfAvgPerID(OpKeyedUnordered):
    """``U(ID, V) -> U(ID, V)``: Table 2's maxOfAvgPerID; emits ``(max avg, marker.ts - 1)``."""

    input = U(None, "V")
    output = U(None, "V")

    def in_(self, key, value):
        return (Fraction(value[0]), 1)      # exact: float + is not associative

    def id(self):
        return (Fraction(0), 0)

    def combine(self, x, y):
        return (x[0] + y[0], x[1] + y[1])

    def initial_state(self):
        return float("-inf")

    def update_state(self, old_state, agg):
        return max(old_state, float(agg[0] / agg[1])) if agg[1] else old_state

    def on_marker(self, new_state, key, marker, emit):
        emit(key, (new_state, marker.timestamp - 1))


def build(par: int = 2, period_ms: int = 10, partitions: int = 2, ordering: str = "sort", step: int = 1) -> Dag:
    """The DAG: hub -> JFM -> (SORT) LI -> ToHome -> maxOfAvg per home -> out; ``step``: LI's grid."""
    dag = Dag(ordering=ordering)
    src = dag.source("hub", period_ms=period_ms, partitions=partitions)
    jfm = dag.add_op(JoinFilterMap(), par, src, name="jfm")
    li = dag.add_op(LinearInterpolation(step), par, jfm, name="li")
    home = dag.add_op(ToHome(), par, li, name="to_home")
    avg = dag.add_op(MaxOfAvgPerID(), par, home, name="max_avg")
    dag.sink("out", avg)
    return dag


def readings(n: int, base_ms: int, step_ms: int = 100, seed: int = 1):
    """``n`` sensor readings ``(key, value)`` on a ``step_ms`` grid, up to 6 steps out of order,
    each sensor missing some points (what the interpolation fills)."""
    import random

    rng = random.Random(seed)
    for i in range(n):
        s = rng.choice(sorted(LOCATION))
        ts = base_ms + i * step_ms - rng.randrange(7) * step_ms
        yield s, {"id": s, "scalar": rng.randrange(100), "ts": ts}


def main() -> None:   # pragma: no cover - an example run by hand
    import json
    import time

    from dataflow_kafka.traces.examples.run import run_example

    def produce():
        base = (int(time.time() * 1000) - 120_000) // 1_000 * 1_000
        return [(k.encode(), json.dumps(v).encode()) for k, v in readings(600, base)]

    run_example(build(period_ms=1_000, step=100), produce, partitions=2, batch=100)


if __name__ == "__main__":   # pragma: no cover
    main()
