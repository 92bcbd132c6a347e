"""A small library of templates for the traces tests (order-sensitive where it matters, exact
arithmetic so that combine is truly associative), and random inputs."""

from __future__ import annotations

import random

from dataflow_kafka.traces import O, OpKeyedOrdered, OpKeyedUnordered, OpStateless, Punctuation, Record, U


class AddOne(OpStateless):
    def on_item(self, key, value, emit):
        emit(key, value + 1)


class Rekey(OpStateless):
    """Re-keys by ``value % 3`` and duplicates odd values (two outputs of one item)."""

    def on_item(self, key, value, emit):
        emit(value % 3, value)
        if value % 2:
            emit(value % 3, value * 10)


class DropEven(OpStateless):
    def on_item(self, key, value, emit):
        if value % 2:
            emit(key, value)


class Diff(OpKeyedOrdered):
    """Order-sensitive: emits value minus the key's previous value, and a count at each marker."""

    def initial_state(self):
        return (None, 0)

    def on_item(self, state, key, value, emit):
        prev, n = state
        emit(key, ("d", value - (prev if prev is not None else 0), n))
        return (value, n + 1)

    def on_marker(self, state, key, marker, emit):
        emit(key, ("m", state[1]))
        return state


class Seq(OpKeyedOrdered):
    """Order-sensitive: emits (position in the key's sequence, value); values stay ints."""

    def initial_state(self):
        return 0

    def on_item(self, state, key, value, emit):
        emit(key, state * 1000 + value % 1000)
        return state + 1


class Total(OpKeyedUnordered):
    """Table 3 with a plain sum: the running total per key, emitted at every marker."""

    def in_(self, key, value):
        return value

    def id(self):
        return 0

    def combine(self, x, y):
        return x + y

    def initial_state(self):
        return 0

    def update_state(self, old_state, agg):
        return old_state + agg

    def on_marker(self, new_state, key, marker, emit):
        emit(key, new_state)


class SumPerKey(Total):
    """Table 3: running total per key, emitted at every marker (also for empty blocks); on_item
    emits the value with the total as of the last marker."""

    def in_(self, key, value):
        return value if isinstance(value, int) else 1

    def update_state(self, old_state, agg):
        return old_state + agg + 1          # +1: counts markers too, so startS matters

    def on_item(self, last_state, key, value, emit):
        emit(key, last_state)


LIBRARY = [AddOne, Rekey, DropEven, Diff, Seq, SumPerKey]
#: templates whose output values are ints (what the next one in a random chain needs)
INT_OUTPUT = [AddOne, Rekey, DropEven, Seq, SumPerKey]


def random_input(rng: random.Random, n: int = 40, partitions: int = 2, keys: int = 4, period: int = 10,
                 disorder: int = 12) -> list:
    """Records with out-of-order event times on ``partitions`` partitions, and punctuations that
    hold (below every later record of the partition), some of them lagging behind."""
    msgs, offsets = [], [0] * partitions
    t = 0
    floor = [0] * partitions
    for _ in range(n):
        p = rng.randrange(partitions)
        t += rng.randrange(3)
        ts = max(floor[p], t - rng.randrange(disorder))
        msgs.append(Record(p, offsets[p], ts, f"k{rng.randrange(keys)}", rng.randrange(50)))
        offsets[p] += 1
        if rng.random() < 0.25:
            floor[p] = max(floor[p], t - disorder)
            msgs.append(Punctuation(p, floor[p]))
    return msgs


def shifted(messages: list, by_ms: int, drop_first_punctuations: int = 0) -> list:
    """``messages`` with every time moved by ``by_ms`` and their first punctuations left out (a source
    that starts late, so its first marker falls in a later block than another source's)."""
    out, dropped = [], 0
    for m in messages:
        if isinstance(m, Punctuation):
            if dropped < drop_first_punctuations:
                dropped += 1
                continue
            out.append(m._replace(ts=m.ts + by_ms))
        else:
            out.append(m._replace(ts=m.ts + by_ms))
    return out


def assert_parallel_equals_local(dag, inputs, seed: int, runs: int = 3) -> None:
    """``runs`` parallel deployments (random interleavings from ``seed``) equal ``run_local``."""
    ref = dag.run_local(inputs)
    for k in range(runs):
        assert dag.run_parallel(inputs, seed=seed + k).canonical() == ref.canonical()


def fan_out_and_in(dag, rng: random.Random, prev: str, left, right, joins, most: int = 4, tag: str = "") -> str:
    """``prev`` -> ``left()`` and ``right()`` (two U branches) -> one of ``joins`` (a fan-out and a fan-in)."""
    a = dag.add_op(left(), rng.randint(1, most), prev, name=f"{tag}left")
    b = dag.add_op(right(), rng.randint(1, most), prev, name=f"{tag}right")
    return dag.add_op(rng.choice(joins)(), rng.randint(1, most), a, b, name=f"{tag}join")
