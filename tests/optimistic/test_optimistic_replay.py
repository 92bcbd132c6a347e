"""Replaying stateful stages (section V.C without a cycle): net output equals an in-order run."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.optimistic import Item, KeyedState, Meta, StatefulMap

from tests.suite import examples


def key(p: tuple) -> str:
    return p[0]


def running_text(state: str, p: tuple) -> tuple[str, list]:
    """Order-sensitive and with a varying number of outputs (none when the state repeats)."""
    new = (state + p[1])[-3:]
    return new, ([] if new == state else [new, len(new)])


STAGE = StatefulMap(running_text, key=key, initial="")


def in_order_outputs(items: list[Item]) -> Counter:
    states: dict = {}
    out: Counter = Counter()
    for it in sorted(items):
        k = key(it.payload)
        states[k], outputs = running_text(states.get(k, ""), it.payload)
        out.update((it.meta.child(j), o) for j, o in enumerate(outputs))
    return out


def net(outputs: list[Item]) -> Counter:
    c: Counter = Counter()
    for o in outputs:
        c[(o.meta, o.payload)] += -1 if o.tombstone else 1
    return Counter({k: v for k, v in c.items() if v})


@st.composite
def interleaving(draw):
    n = draw(st.integers(1, 20))
    valid, events = [], []
    for i in range(n):
        it = Item(Meta(draw(st.integers(0, 5)), 0, i), (draw(st.sampled_from("kl")), draw(st.sampled_from("ab"))))
        if draw(st.integers(0, 3)):
            valid.append(it)
            events.append(it)
        else:  # an item that upstream emitted and then cancelled: both arrive, in any order
            events += [it, it.retraction()]
    return valid, draw(st.permutations(events))


@settings(max_examples=examples(300), deadline=None)
@given(case=interleaving(), cut=st.integers(0, 40))
def test_net_output_equals_in_order_run_for_any_interleaving(case, cut):
    valid, events = case
    state = STAGE.open_state()
    out: list[Item] = []
    for i, ev in enumerate(events):
        if i == cut:  # serialise mid-stream: nothing may change
            state = KeyedState.from_bytes(state.to_bytes())
        out += STAGE.process(state, [ev])
    assert net(out) == in_order_outputs(valid)
    assert state.entry_count() == len(valid)  # cancelled pairs leave nothing behind


def test_replay_stops_when_the_state_converges():
    calls = []

    def counting(state, p):
        calls.append(p)
        return running_text(state, p)

    stage = StatefulMap(counting, key=key, initial="")
    state = stage.open_state()
    stage.process(state, [Item(Meta(t, 0, t), ("k", "a")) for t in range(10, 20)])
    calls.clear()
    stage.process(state, [Item(Meta(15, 0, 99), ("k", "a"))])  # late, but the state is "aaa" anyway
    assert calls == [("k", "a")]  # only the late item: the state entering the next is unchanged


def test_gc_keeps_base_state_and_later_inserts_still_replay():
    state = STAGE.open_state()
    STAGE.process(state, [Item(Meta(t, 0, t), ("k", c)) for t, c in zip(range(5), "abcab")])
    assert STAGE.collect_garbage(state, 3) == 3
    assert state.base_state("k") == "abc" and state.entry_count() == 2
    out = STAGE.process(state, [Item(Meta(3, 0, -1), ("k", "z"))])  # before (3, 0, 3): replays 2
    assert net(out) == Counter({
        (Meta(3, 0, -1, (0,)), "bcz"): 1, (Meta(3, 0, -1, (1,)), 3): 1,
        (Meta(3, 0, 3, (0,)), "bca"): -1, (Meta(3, 0, 3, (0,)), "cza"): 1,
        (Meta(4, 0, 4, (0,)), "cab"): -1, (Meta(4, 0, 4, (0,)), "zab"): 1,
    })
