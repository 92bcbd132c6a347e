"""Brute-force references for the join engines, written without them (nested loops, explicit
window arithmetic), random inputs, and a runner that splits rows into key groups."""

from __future__ import annotations

import random
from collections import Counter

from dataflow_kafka.joins import LEFT, RIGHT, SidePunctuation, Row
from dataflow_kafka.keygroups.routing import key_group_of
from dataflow_kafka.windowing import END_OF_TIME_MS, SessionWindow, SlidingWindow, TumblingWindow

KEYS = ["k0", "k1", "k2", 7]


def random_batches(rng: random.Random, n_batches: int = 8, per_batch: int = 8, disorder: int = 12,
                   late_every: int = 9, keys=KEYS) -> list[tuple[list, list, int]]:
    """Micro-batches ``(rows, punctuations, processing time)``: per side an event time that moves
    on with its own speed, rows up to ``disorder`` ms early, some much later (late data), and a
    punctuation per side now and then (each side's newest event time minus a lag)."""
    clock = {LEFT: rng.randrange(20), RIGHT: rng.randrange(20)}
    speed = {LEFT: rng.choice([1, 2, 3]), RIGHT: rng.choice([1, 2, 3])}
    newest = dict(clock)
    out = []
    for b in range(n_batches):
        rows, puncts = [], []
        for _ in range(rng.randint(0, per_batch)):
            side = rng.choice([LEFT, RIGHT])
            clock[side] += rng.randrange(speed[side] + 1)
            ts = clock[side] - rng.randrange(disorder)
            if late_every and rng.randrange(late_every) == 0:
                ts -= rng.randrange(20, 60)
            newest[side] = max(newest[side], ts)
            rows.append(Row(side, rng.choice(keys), max(ts, 0), rng.randrange(100)))
        for side in (LEFT, RIGHT):
            if rng.random() < 0.6:
                puncts.append(SidePunctuation(side, newest[side] - rng.randrange(8)))
        out.append((rows, puncts, 10 * b))
    return out


def flush() -> tuple[list, list, int]:
    """The last batch: both sides at the end of time (every window and row is complete)."""
    return [], [SidePunctuation(LEFT, END_OF_TIME_MS), SidePunctuation(RIGHT, END_OF_TIME_MS)], 10 ** 9


def run_in_key_groups(make_engine, batches: list, groups: int) -> list:
    """Every batch through ``groups`` engines (rows by key group, punctuations to all); their outputs."""
    engines = [make_engine() for _ in range(groups)]
    outs = []
    for rows, puncts, pt in batches:
        for g, e in enumerate(engines):
            mine = [r for r in rows if key_group_of(repr(r.key), groups) == g]
            outs.append(e.process(mine, puncts, pt))
    return outs


def watermarks_before(batches: list):
    """The join's low watermark before each batch (None until both sides punctuated)."""
    newest: dict = {}
    for rows, puncts, _ in batches:
        yield None if len(newest) < 2 else min(newest.values())
        for side, ts in puncts:
            newest[side] = max(newest.get(side, ts), ts)


def windows_of(window, ts: int) -> list[tuple[int, int]]:
    if isinstance(window, TumblingWindow):
        start = ts - (ts - window.offset_ms) % window.size_ms
        return [(start, start + window.size_ms)]
    if isinstance(window, SlidingWindow):
        out, s = [], ts - (ts - window.offset_ms) % window.slide_ms       # the last start at or before ts
        while s > ts - window.size_ms:
            out.append((s, s + window.size_ms))
            s -= window.slide_ms
        return out
    raise TypeError(window)


def nested_loop_join(lefts: list, rights: list, how: str) -> Counter:
    """``Counter`` of ``(left, right)`` rows (``(ts, value)`` or None) of one key and window."""
    out: Counter = Counter()
    for lt in lefts:
        for rt in rights:
            out[(lt, rt)] += 1
    if not rights and how in ("left_outer", "full_outer"):
        out.update((lt, None) for lt in lefts)
    if not lefts and how in ("right_outer", "full_outer"):
        out.update((None, rt) for rt in rights)
    return out


def window_join(batches: list, window, how: str, lateness: int) -> dict:
    """``{(repr(key), (start, end)): Counter of joined rows}``: tumbling/sliding windows, a copy
    dropped when its window ended at least ``lateness`` before the watermark at its batch;
    sessions (no lateness drops expected): gaps merged over both sides' rows."""
    groups: dict = {}
    for (rows, _, _), wm in zip(batches, watermarks_before(batches)):
        for r in rows:
            if isinstance(window, SessionWindow):
                groups.setdefault(repr(r.key), []).append(r)
                continue
            for w in windows_of(window, r.ts_ms):
                if wm is not None and wm - lateness >= w[1]:
                    continue
                sides = groups.setdefault((repr(r.key), w), ([], []))
                sides[0 if r.side == LEFT else 1].append((r.ts_ms, r.value))
    if isinstance(window, SessionWindow):
        groups = _sessions(groups, window.gap_ms)
    out = {}
    for kw, (lefts, rights) in groups.items():
        c = nested_loop_join(lefts, rights, how)
        if c:
            out[kw] = c
    return out


def _sessions(rows_by_key: dict, gap: int) -> dict:
    out = {}
    for key, rows in rows_by_key.items():
        rows = sorted(rows, key=lambda r: r.ts_ms)
        cur, start, end = [], None, None
        for r in rows + [None]:
            if r is None or (end is not None and r.ts_ms >= end):
                if cur:
                    out[(key, (start, end))] = ([(x.ts_ms, x.value) for x in cur if x.side == LEFT],
                                                [(x.ts_ms, x.value) for x in cur if x.side == RIGHT])
                if r is None:
                    break
                cur, start, end = [], None, None
            cur.append(r)
            start = r.ts_ms if start is None else start
            end = r.ts_ms + gap if end is None else max(end, r.ts_ms + gap)
    return out


def interval_join(batches: list, lower: int, upper: int, how: str, lateness: int) -> Counter:
    """``Counter`` of ``(repr(key), left, right)``: a nested loop over the rows that were not late."""
    accepted = []
    for (rows, _, _), wm in zip(batches, watermarks_before(batches)):
        accepted += [r for r in rows if wm is None or r.ts_ms >= wm - lateness]
    lefts = [r for r in accepted if r.side == LEFT]
    rights = [r for r in accepted if r.side == RIGHT]
    out: Counter = Counter()
    hit_l, hit_r = set(), set()
    for i, lt in enumerate(lefts):
        for j, rt in enumerate(rights):
            if lt.key == rt.key and lt.ts_ms + lower <= rt.ts_ms <= lt.ts_ms + upper:
                out[(repr(lt.key), (lt.ts_ms, lt.value), (rt.ts_ms, rt.value))] += 1
                hit_l.add(i)
                hit_r.add(j)
    if how in ("left_outer", "full_outer"):
        out.update((repr(lt.key), (lt.ts_ms, lt.value), None) for i, lt in enumerate(lefts) if i not in hit_l)
    if how in ("right_outer", "full_outer"):
        out.update((repr(rt.key), None, (rt.ts_ms, rt.value)) for j, rt in enumerate(rights) if j not in hit_r)
    return out
