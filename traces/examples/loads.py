"""Load prediction for smart homes: the transduction DAG of data-trace types Figure 5 (§6, the DEBS
2014 Grand Challenge with a model-based prediction), with a fan-out and a fan-in.

Smart plugs (building, unit, plug) send load measurements (W) about every 2 s, with gaps,
repeated timestamps and some disorder. Per device type the DAG predicts the consumption of the
next 10 minutes, once per second:

- ``JoinFilterMap`` (OpStateless): join with the plug -> device type table, keep some device
  types, emit ``(plug, (ts, load))``;
- SORT, ``Interpolate`` (OpKeyedOrdered per plug): linear interpolation onto a 1 s grid;
- ``ToDeviceType`` (OpStateless): re-key by device type;
- SORT, ``Average`` (OpKeyedOrdered per device type): the average over plugs per grid second,
  emitted once a second is 5 s behind the block's marker (an interpolated point is at most 5 s
  older than the measurement that produced it: ``Interpolate`` does not bridge longer gaps);
- fan-out: ``PastMinute`` (OpKeyedOrdered, keeps the key: the energy of the last minute, Wh) and
  ``CurrentLoad`` (OpStateless, keeps the key): the prediction's features;
- fan-in, SORT, ``Predict`` (OpKeyedOrdered per device type): once both features of a second
  arrived, a small regression tree (standing in for the paper's REPTree, trained on other data)
  predicts the next 10 minutes' consumption (Wh) from the time of day, the load and the energy of
  the past minute.

The paper's text lists the stages one after the other (Predict computes its features itself);
here the two features are branches of a fan-out that meet again at Predict. Sinks: ``averages``
(per device type and second) and ``predictions``.

``python -m dataflow_kafka.traces.examples.loads`` produces readings to the embedded broker, runs the DAG on
Spark (``format("dataflow-kafka")``) and prints the last predictions and whether every block of
every sink equals ``run_local``'s.
"""

from __future__ import annotations

import random

from dataflow_kafka.traces import Dag, O, OpKeyedOrdered, OpStateless, U

__all__ = ["PLUG_DEVICE", "JoinFilterMap", "Interpolate", "ToDeviceType", "Average", "PastMinute", "CurrentLoad",
           "Predict", "build", "measurements", "GRID_MS", "HORIZON_MS"]

GRID_MS = 1_000        # one value per second
HORIZON_MS = 5_000     # Average waits this long behind the marker; Interpolate bridges no longer gap
#: plug -> device type (the table JFM joins with); ``tv`` plugs are filtered out
PLUG_DEVICE = {f"b{b}-u{u}-p{p}": ("ac", "lights", "heater", "tv")[(b + u + p) % 4]
               for b in range(2) for u in range(2) for p in range(3)}
KEPT = ("ac", "lights", "heater")
_BASE_W = {"ac": 900.0, "lights": 60.0, "heater": 1500.0, "tv": 120.0}


class JoinFilterMap(OpStateless):
    """``U(Ut, M) -> U(Plug, VT)``: keep the plugs of kept device types; emit ``(plug, (ts, load))``."""

    input = U(None, "M")
    output = U("Plug", "VT")

    def __init__(self, devices: dict | None = None, kept: tuple = KEPT) -> None:
        self.devices, self.kept = PLUG_DEVICE if devices is None else devices, kept

    def on_item(self, key, value, emit):
        if self.devices.get(value["plug"]) in self.kept:
            emit(value["plug"], (int(value["ts"]), float(value["load"])))


class Interpolate(OpKeyedOrdered):
    """``O(Plug, VT) -> O(Plug, VT)``: the load on every grid second between two measurements
    (repeated timestamps: the later value counts; gaps above ``HORIZON_MS`` are not bridged)."""

    input = O("Plug", "VT")
    output = O("Plug", "VT")

    def on_item(self, state, key, value, emit):
        ts, load = value
        if state is not None and 0 < ts - state[0] <= HORIZON_MS:
            t0, y0 = state
            g = (t0 // GRID_MS + 1) * GRID_MS
            while g <= ts:
                emit(key, (g, round(y0 + (load - y0) * (g - t0) / (ts - t0), 3)), g)
                g += GRID_MS
        elif ts % GRID_MS == 0 and (state is None or ts != state[0]):
            emit(key, (ts, load), ts)
        return (ts, load)


class ToDeviceType(OpStateless):
    """``U(Plug, VT) -> U(DType, VT)``: re-key by the plug's device type."""

    input = U("Plug", "VT")
    output = U("DType", "VT")

    def __init__(self, devices: dict | None = None) -> None:
        self.devices = PLUG_DEVICE if devices is None else devices

    def on_item(self, key, value, emit):
        emit(self.devices[key], value)


class Average(OpKeyedOrdered):
    """``O(DType, VT) -> O(DType, VT)``: per grid second the average over plugs, emitted in time
    order once the second is ``HORIZON_MS`` behind the marker. State: ``(sums per second, last emitted)``."""

    input = O("DType", "VT")
    output = O("DType", "VT")

    def initial_state(self):
        return ((), None)

    def on_item(self, state, key, value, emit):
        sums, done = state
        t, load = value
        if done is not None and t <= done:
            return state                                  # too late for its second (not expected)
        acc = dict(sums)
        s, n = acc.get(t, (0.0, 0))
        acc[t] = (s + load, n + 1)
        return (tuple(sorted(acc.items())), done)

    def on_marker(self, state, key, marker, emit):
        sums, done = state
        bound = marker.timestamp - HORIZON_MS
        for t, (s, n) in sums:
            if t <= bound:
                emit(key, (t, round(s / n, 3)), t)
                done = t
        return (tuple(x for x in sums if x[0] > bound), done)


class PastMinute(OpKeyedOrdered):
    """``O(DType, VT) -> U(DType, Feature)``: ``("energy", t, Wh of the last 60 s)`` per second."""

    input = O("DType", "VT")
    output = U("DType", "Feature")

    def initial_state(self):
        return ()

    def on_item(self, state, key, value, emit):
        t, load = value
        window = tuple(x for x in state if x[0] > t - 60_000) + ((t, load),)
        emit(key, ("energy", t, round(sum(w for _, w in window) * GRID_MS / 3_600_000, 4)), t)
        return window


class CurrentLoad(OpStateless):
    """``U(DType, VT) -> U(DType, Feature)``: ``("load", t, W)``."""

    input = U("DType", "VT")
    output = U("DType", "Feature")
    preserves_key = True

    def on_item(self, key, value, emit):
        emit(key, ("load", value[0], value[1]))


def regression_tree(hour: int, load_w: float, past_minute_wh: float) -> float:
    """A fixed regression tree: Wh of the next 10 minutes from the time of day, the load and the
    energy of the past minute (a stand-in for the paper's REPTree)."""
    steady = load_w * 10 / 60
    trend = past_minute_wh * 10
    if load_w < 200:
        return round(0.9 * steady + 0.1 * trend if 7 <= hour < 22 else 0.6 * steady, 3)
    if past_minute_wh * 60 > load_w * 1.2:                # the last minute drew more than now: falling
        return round(0.7 * steady + 0.2 * trend, 3)
    return round(steady * (1.1 if 17 <= hour < 21 else 0.95), 3)


class Predict(OpKeyedOrdered):
    """``O(DType, Feature) -> O(DType, Pred)``: once both features of a second arrived (SORT
    feeds them in time order), ``(t, Wh of the next 10 minutes)``."""

    input = O("DType", "Feature")
    output = O("DType", "Pred")

    def initial_state(self):
        return None                                       # (t, {feature: value}) of the second in progress

    def on_item(self, state, key, value, emit):
        name, t, x = value
        features = dict(state[1]) if state is not None and state[0] == t else {}
        features[name] = x
        if len(features) == 2:
            hour = t // 3_600_000 % 24
            emit(key, (t, regression_tree(hour, features["load"], features["energy"])), t)
        return (t, tuple(sorted(features.items())))


def build(period_ms: int = 1_000, partitions: int = 2, par: int = 2, ordering: str = "sort") -> Dag:
    """plugs -> JFM -> (SORT) Interpolate -> ToDeviceType -> (SORT) Average -> {PastMinute,
    CurrentLoad} -> (SORT) Predict -> predictions; Average -> averages."""
    dag = Dag(ordering)
    src = dag.source("plugs", period_ms=period_ms, partitions=partitions)
    jfm = dag.add_op(JoinFilterMap(), par, src, name="jfm")
    li = dag.add_op(Interpolate(), par, jfm, name="interpolate")
    avg = dag.add_op(Average(), par, dag.add_op(ToDeviceType(), par, li, name="to_device"), name="average")
    features = [dag.add_op(PastMinute(), par, avg, name="past_minute"), dag.add_op(CurrentLoad(), par, avg,
                                                                                    name="current_load")]
    dag.sink("predictions", dag.add_op(Predict(), par, *features, name="predict"))
    dag.sink("averages", avg)
    return dag


def measurements(seconds: int, base_ms: int, seed: int = 1):
    """``(plug, {"plug", "load", "ts"})`` of every plug over ``seconds``: about one every 2 s, some
    repeated timestamps, some gaps, up to 3 s out of order (in the order they are sent)."""
    rng = random.Random(seed)
    out = []
    for plug, device in sorted(PLUG_DEVICE.items()):
        t = base_ms + rng.randrange(2_000)
        while t < base_ms + seconds * 1_000:
            load = max(0.0, _BASE_W[device] * (1 + 0.3 * rng.random()) - (300 if rng.random() < 0.1 else 0))
            for _ in range(2 if rng.random() < 0.05 else 1):           # the same timestamp twice
                out.append((t + rng.randrange(3_000), plug, {"plug": plug, "load": round(load, 1), "ts": t}))
            t += 1_500 + rng.randrange(1_000) + (8_000 if rng.random() < 0.02 else 0)
    out.sort(key=lambda x: x[0])
    return [(plug, value) for _, plug, value in out]


def main() -> None:   # pragma: no cover - an example run by hand
    import json
    import time

    from dataflow_kafka.traces.examples.run import run_example

    def produce():
        base = (int(time.time() * 1000) - 240_000) // 1_000 * 1_000
        return [(k.encode(), json.dumps(v).encode()) for k, v in measurements(180, base)]

    run_example(build(), produce, partitions=2, batch=150, show=6)


if __name__ == "__main__":   # pragma: no cover
    main()
