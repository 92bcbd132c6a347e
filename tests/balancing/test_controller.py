"""The Flux-style controller: each move against a brute-force best move, variance never raised, no
moves on a steady load after convergence, skew reduced, hysteresis, cooldown, bounded moves, bad input."""

from __future__ import annotations

import doctest
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.balancing.controller import ControllerConfig, FluxController, key_group_loads, move_command, plan_moves

from tests.suite import examples


def _slot_loads(loads, routing, slots):
    out = {s: 0.0 for s in slots}
    for kg, s in routing.items():
        out[s] += loads.get(kg, 0.0)
    return np.array([out[s] for s in sorted(slots)])


def _as_load(loads, routing):
    """``{slot: {key_group: (rows, processor_ms)}}`` with rows = processor_ms = the load."""
    out: dict[int, dict[int, tuple[float, float]]] = {}
    for kg, s in routing.items():
        out.setdefault(s, {})[kg] = (loads[kg], loads[kg])
    return out


@st.composite
def tables(draw, min_slots=2, max_slots=6, max_groups=40):
    slots = list(range(draw(st.integers(min_slots, max_slots))))
    n = draw(st.integers(1, max_groups))
    routing = {kg: draw(st.sampled_from(slots)) for kg in range(n)}
    loads = {kg: float(draw(st.integers(0, 1000))) for kg in range(n)}
    return loads, routing, slots


def _best_move_brute_force(loads, routing, slots):
    """The first move Flux makes: slots sorted by load (ties: the lower slot id counts as more
    loaded), the i-th most loaded against the i-th least loaded, the first pair where moving a key
    group lowers the variance, and of its key groups the one whose move gives the lowest variance
    (ties: the larger key group, then the lower id). Loads are integers here, so sums of squares
    (the variance up to constants) are exact."""
    sl = dict(zip(sorted(slots), _slot_loads(loads, routing, slots)))
    order = sorted(sl, key=lambda s: (-sl[s], s))
    before = sum(v * v for v in sl.values())
    for i in range(len(order) // 2):
        hi, lo = order[i], order[-1 - i]
        best = None
        for kg in sorted(k for k, s in routing.items() if s == hi):
            after = float(np.sum(_slot_loads(loads, {**routing, kg: lo}, slots) ** 2))
            key = (after, -loads[kg], kg)
            if after < before and (best is None or key < best[0]):
                best = (key, kg)
        if best is not None:
            return best[1], hi, lo
    return None


@settings(max_examples=examples(300), deadline=None)
@given(table=tables())
def test_first_move_is_the_brute_force_best(table):
    loads, routing, slots = table
    got = plan_moves(loads, routing, slots, max_moves=1)
    want = _best_move_brute_force(loads, routing, slots)
    assert got == ([] if want is None else [want])


@settings(max_examples=examples(300), deadline=None)
@given(table=tables(), max_moves=st.integers(0, 12))
def test_every_move_lowers_the_variance_and_never_raises_the_maximum(table, max_moves):
    loads, routing, slots = table
    moves = plan_moves(loads, routing, slots, max_moves=max_moves)
    assert len(moves) <= max_moves
    assert len({kg for kg, _, _ in moves}) == len(moves)          # a key group moves once per period
    current = dict(routing)
    for kg, frm, to in moves:
        assert current[kg] == frm != to
        before = _slot_loads(loads, current, slots)
        current[kg] = to
        after = _slot_loads(loads, current, slots)
        assert np.var(after) < np.var(before)
        assert after.max() <= before.max()


@settings(max_examples=examples(150), deadline=None)
@given(table=tables(), smoothing=st.sampled_from([0.3, 0.5, 1.0]), cooldown=st.integers(0, 3),
       max_moves=st.integers(1, 4))
def test_steady_load_converges_and_then_issues_no_moves(table, smoothing, cooldown, max_moves):
    loads, routing, slots = table
    cfg = ControllerConfig(metric="rows", smoothing=smoothing, max_moves=max_moves, cooldown_periods=cooldown)
    c = FluxController(routing, slots, config=cfg)
    history = []
    for _ in range(120):
        before = _slot_loads(loads, c.routing, slots)
        cmds = c.step(_as_load(loads, c.routing))
        after = _slot_loads(loads, c.routing, slots)
        if cmds:
            assert np.var(after) < np.var(before)                     # never a move that raises variance
            assert after.max() <= before.max()
        history.append(len(cmds))
    assert sum(history[-40:]) == 0, history


def _skewed(rng, n_groups, slots, hot_slot, extra=0.5):
    routing = {kg: kg % len(slots) for kg in range(n_groups)}
    loads = {kg: float(rng.uniform(80, 120)) for kg in range(n_groups)}
    for kg, s in routing.items():
        if s == hot_slot:
            loads[kg] *= 1 + extra
    return loads, routing


def _ratio(loads, routing, slots):
    x = _slot_loads(loads, routing, slots)
    return x.max() / x.mean()


@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 2**31), n_slots=st.integers(2, 6), per_slot=st.integers(4, 30),
       hot=st.integers(0, 5))
def test_skewed_load_lowers_max_over_mean(seed, n_slots, per_slot, hot):
    rng = np.random.default_rng(seed)
    slots = list(range(n_slots))
    loads, routing = _skewed(rng, n_slots * per_slot, slots, hot % n_slots)
    start = _ratio(loads, routing, slots)
    c = FluxController(routing, slots, config=ControllerConfig(metric="processor_ms", max_moves=4))
    ratios = [start]
    for _ in range(30):
        c.step(_as_load(loads, c.routing))
        ratios.append(_ratio(loads, c.routing, slots))
    assert all(b <= a + 1e-12 for a, b in zip(ratios, ratios[1:]))         # never worse
    x0 = _slot_loads(loads, routing, slots)
    movable = [loads[kg] for kg, s in routing.items() if s == int(np.argmax(x0)) and loads[kg] < x0.max() - x0.min()]
    if start > 1 + c.config.start_imbalance and movable and np.sum(x0 == x0.max()) == 1:
        assert ratios[-1] < start                     # a suitable key group on the unique hottest slot
    # stuck only where Flux must stop: no key group on the most loaded slot is smaller than the gap
    x = _slot_loads(loads, c.routing, slots)
    hot = [loads[kg] for kg, s in c.routing.items() if s == int(np.argmax(x))]
    assert ratios[-1] <= 1 + c.config.start_imbalance or min(hot) >= x.max() - x.min()


def test_rotating_skew_is_followed_and_a_noisy_steady_load_does_not_oscillate():
    """Moves take effect one period after they are issued (the query reads the control topic at its
    next batch): the load is measured on the table the query has, not on the controller's."""
    rng = np.random.default_rng(7)
    slots = [0, 1, 2, 3]
    base, routing = _skewed(rng, 64, slots, hot_slot=0, extra=0.0)
    c = FluxController(routing, slots, config=ControllerConfig(metric="processor_ms"))
    actual, issued = dict(routing), []

    def period(loads):
        nonlocal issued
        noisy = {kg: v * rng.uniform(0.9, 1.1) for kg, v in loads.items()}
        measured = _as_load(noisy, actual)
        for m in issued:
            actual[m["key_group"]] = m["to"]
        issued = c.step(measured)
        return len(issued)

    with_balancer, without = [], []
    for phase in range(4):                      # +50% on the key groups that were on slot `phase` at the start
        hot = {kg for kg, s in routing.items() if s == phase}
        loads = {kg: v * (1.5 if kg in hot else 1.0) for kg, v in base.items()}
        for _ in range(15):
            period(loads)
            with_balancer.append(_ratio(loads, actual, slots))
            without.append(_ratio(loads, routing, slots))
    assert max(without[5::15]) > 1.3
    assert max(with_balancer[5::15]) < 1.15           # five periods into every phase, balanced again
    # the same noise on a load without skew, after convergence: no moves
    moves = [period(base) for _ in range(60)]
    assert sum(moves[20:]) == 0, moves


def test_hysteresis_starts_above_start_and_stops_at_stop_imbalance():
    cfg = ControllerConfig(metric="rows", smoothing=1.0, start_imbalance=0.2, stop_imbalance=0.05, max_moves=1)
    # slot loads 108 / 92: max/mean = 1.08, inside the band: nothing happens
    c = FluxController({0: 0, 1: 0, 2: 1, 3: 1}, [0, 1], config=cfg)
    assert c.step({0: {0: (100, 0), 1: (8, 0)}, 1: {2: (90, 0), 3: (2, 0)}}) == []
    assert not c.balancing
    # 130 / 70: 1.3 > 1.2 starts; key group 1 (20) moves, leaving 110 / 90 = 1.1 > 1.05: still on
    c = FluxController({0: 0, 1: 0, 2: 1, 3: 1, 4: 1}, [0, 1], config=cfg)
    assert c.step({0: {0: (110, 0), 1: (20, 0)}, 1: {2: (60, 0), 3: (6, 0), 4: (4, 0)}}) == [move_command(1, 1)]
    assert c.balancing
    # slot 0 holds only key group 0, larger than the gap: nothing to move, balancing stays on
    assert c.step({0: {0: (110, 0)}, 1: {1: (20, 0), 2: (60, 0), 3: (6, 0), 4: (4, 0)}}) == []
    assert c.balancing
    # the load evens out to 102 / 98 (1.02 <= 1.05): balancing stops
    assert c.step({0: {0: (102, 0)}, 1: {1: (20, 0), 2: (68, 0), 3: (6, 0), 4: (4, 0)}}) == []
    assert not c.balancing
    # and 1.15 (inside the band again) does not restart it
    assert c.step({0: {0: (115, 0)}, 1: {1: (20, 0), 2: (55, 0), 3: (6, 0), 4: (4, 0)}}) == []
    assert not c.balancing


def test_cooldown_keeps_a_moved_key_group_in_place():
    cfg = ControllerConfig(metric="rows", smoothing=1.0, start_imbalance=0.0, stop_imbalance=0.0,
                           max_moves=1, cooldown_periods=2)
    c = FluxController({0: 0, 1: 0, 2: 1}, [0, 1], config=cfg)
    assert c.step({0: {0: (10, 0), 1: (4, 0)}, 1: {2: (2, 0)}}) == [move_command(1, 1)]
    # the load changes: key group 1 is the only one that could move back (key group 2 is larger
    # than the gap), but it is cooling down for 2 periods
    flipped = {0: {0: (5, 0)}, 1: {1: (5, 0), 2: (8, 0)}}
    assert c.step(flipped) == []
    assert c.step(flipped) == []
    assert c.step(flipped) == [move_command(1, 0)]


def test_issued_moves_count_at_once_and_are_not_issued_again():
    cfg = ControllerConfig(metric="rows", smoothing=1.0)
    c = FluxController({0: 0, 1: 0, 2: 1}, [0, 1, 2], config=cfg)
    load = {0: {0: (50, 0), 1: (50, 0)}, 1: {2: (50, 0)}}
    assert c.step(load) == [move_command(0, 2)]                   # slot 2 is idle: no load entries
    assert c.routing == {0: 2, 1: 0, 2: 1}
    assert c.step(load) == []            # the next period still measured key group 0 on slot 0
    assert c.slot_loads() == {0: 50.0, 1: 50.0, 2: 50.0}


def test_a_stale_table_is_corrected_from_where_key_groups_ran():
    # a restarted controller believes every key group is on slot 0; the query has moved 2 and 3 to slot 1
    cfg = ControllerConfig(metric="rows", smoothing=1.0)
    c = FluxController({0: 0, 1: 0, 2: 0, 3: 0}, [0, 1], config=cfg)
    assert c.step({0: {0: (50, 0), 1: (50, 0)}, 1: {2: (50, 0), 3: (50, 0)}}) == []
    assert c.routing == {0: 0, 1: 0, 2: 1, 3: 1}
    # a key group seen on two slots in one period (it moved within it) keeps its place in the table
    c.step({0: {0: (50, 0), 1: (50, 0), 2: (10, 0)}, 1: {2: (40, 0), 3: (50, 0)}})
    assert c.routing[2] == 1


def test_new_key_groups_join_the_table_where_they_ran_and_metric_choice():
    c = FluxController({0: 0}, [0, 1], config=ControllerConfig(metric="processor_ms", smoothing=1.0))
    c.step({1: {5: (1, 7.0)}, 0: {0: (1000, 7.0)}})
    assert c.routing == {0: 0, 5: 1}
    assert c.loads == {0: 7.0, 5: 7.0}
    assert key_group_loads({0: {1: (3, 2.5)}, 1: {1: (4, 1.5)}}, "rows") == {1: 7.0}
    assert key_group_loads({0: {1: (3, 2.5)}, 1: {1: (4, 1.5)}}) == {1: 4.0}


def test_max_moves_bounds_a_period():
    routing = {kg: 0 for kg in range(20)}
    c = FluxController(routing, range(4), config=ControllerConfig(metric="rows", max_moves=3))
    cmds = c.step({0: {kg: (10, 0) for kg in range(20)}})
    assert len(cmds) == 3 and {m["to"] for m in cmds} == {1, 2, 3}
    assert all(set(m) == {"op", "key_group", "to"} and m["op"] == "move" for m in cmds)
    assert plan_moves({0: 5.0, 1: 5.0}, {0: 0, 1: 0}, [0, 1], max_moves=5, frozen=[0, 1]) == []
    assert plan_moves({0: 5.0, 1: 5.0}, {0: 0, 1: 0}, [0, 1], max_moves=5, min_gap=10.0) == []


@pytest.mark.parametrize("kw, message", [
    ({"metric": "cpu"}, "metric must be one of"),
    ({"smoothing": 0}, "smoothing must be in"),
    ({"start_imbalance": -1}, "start_imbalance must be"),
    ({"start_imbalance": 0.1, "stop_imbalance": 0.2}, "stop_imbalance .0.2. must not exceed"),
    ({"max_moves": 1.5}, "max_moves must be an integer"),
    ({"cooldown_periods": -1}, "cooldown_periods must be"),
])
def test_bad_config_names_the_option(kw, message):
    with pytest.raises(ValueError, match=message):
        ControllerConfig(**kw)


def test_bad_load_or_routing_names_the_slot_and_key_group():
    c = FluxController({0: 0}, [0, 1])
    with pytest.raises(ValueError, match="slot 9, not one of the slots"):
        c.step({9: {0: (1, 1.0)}})
    with pytest.raises(ValueError, match="slot 0, key group 0: expected"):
        c.step({0: {0: 5}})
    with pytest.raises(ValueError, match="slot 1, key group 3: processor_ms must be"):
        c.step({1: {3: (1, -2.0)}})
    with pytest.raises(ValueError, match="key group 4 is on slot 7"):
        FluxController({4: 7}, [0, 1])
    with pytest.raises(ValueError, match="no slots"):
        FluxController({})


def test_docstring_examples():
    import dataflow_kafka.balancing.controller as module
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_a_slot_that_only_closed_old_panes_is_not_where_the_key_group_runs():
    """After a move, the old slot still reports the key group with 0 rows while it closes the
    group's old panes; only a slot that ran rows of it says where it is."""
    c = FluxController({0: 1, 1: 0}, [0, 1])
    c.step({0: {0: (0, 0.4), 1: (5, 1.0)}})
    assert c.routing[0] == 1
    c.step({0: {0: (3, 1.0), 1: (5, 1.0)}})       # rows of it on slot 0: it runs there now
    assert c.routing[0] == 0
