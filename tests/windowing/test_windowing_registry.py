"""Windows and aggregations describe themselves: JSON registration by type name, shapes and
capabilities the engines compile from, Spark types and components of the aggregations."""

from __future__ import annotations

import numpy as np
import pytest

from dataflow_kafka.slicer import SlicingWindowOperator
from dataflow_kafka.slicer.compile import RUNTIMES, compile_window, is_builtin
from dataflow_kafka.watermarks.windows import WINDOW_FNS, FixedWindowFn, compile_window_fn
from dataflow_kafka.windowing import (
    M4, AggregateFunction, Count, GlobalWindow, Max, Mean, Median, Min, Quantile, SessionWindow, SlidingWindow,
    Sum, ToList, TumblingWindow, Window, window_from_json,
)
from dataflow_kafka.windowing.aggregations import Vectorised
from dataflow_kafka.windowing.components import Reduced, register_component
from dataflow_kafka.windowing.rows import aggregation_columns
from dataflow_kafka.windowing.windows import WindowShape, window_types


class DayWindow(Window):
    """A window type added in its own file: tumbling days, shifted by ``offset_ms``."""

    __slots__ = ("offset_ms",)
    type_name = "test_day"
    json_aliases = ("test_daily",)
    _fields = ("offset_ms",)
    shape = WindowShape.TUMBLING

    def __init__(self, offset_ms: int = 0) -> None:
        self._set(offset_ms=offset_ms)

    @property
    def grid(self) -> tuple[int, int, int]:
        return (86_400_000, 86_400_000, self.offset_ms)


def test_built_in_windows_register_their_json_names():
    types = window_types()
    assert {n: types[n] for n in ("tumbling", "fixed", "sliding", "session", "sessions", "global")} == {
        "tumbling": TumblingWindow, "fixed": TumblingWindow, "sliding": SlidingWindow,
        "session": SessionWindow, "sessions": SessionWindow, "global": GlobalWindow}


def test_a_new_window_type_registers_itself_and_every_engine_compiles_it_by_shape():
    assert window_types()["test_day"] is DayWindow and window_types()["test_daily"] is DayWindow
    assert window_from_json({"type": "test_daily", "offset_ms": 5}) == DayWindow(5)
    assert window_from_json(DayWindow(7).to_json()) == DayWindow(7)
    assert compile_window(DayWindow()) == compile_window(TumblingWindow(86_400_000))
    assert compile_window_fn(DayWindow(3)) == FixedWindowFn(86_400_000, 3)
    op = SlicingWindowOperator([DayWindow()], [Sum()], emission="compact")
    op.process_elements(np.array([1.0, 2.0]), np.array([10, 86_400_010]))
    assert [(r.start, r.value) for r in op.process_watermark(2 * 86_400_000)] == [(0, 1), (86_400_000, 2)]


def test_the_engines_messages_list_the_registered_window_types_without_an_edit():
    for compile_ in (compile_window, compile_window_fn):
        with pytest.raises(TypeError) as err:
            compile_(object())
        assert "TumblingWindow, SlidingWindow, SessionWindow, GlobalWindow" in str(err.value)
        assert "DayWindow" in str(err.value)             # defined in this file, named by both engines


def test_a_type_name_cannot_be_taken_twice():
    with pytest.raises(TypeError, match="'tumbling': taken by TumblingWindow"):
        type("Other", (Window,), {"__slots__": (), "type_name": "tumbling", "shape": WindowShape.TUMBLING})


def test_every_shape_has_a_runtime_in_both_engines():
    assert set(RUNTIMES) == set(WindowShape) == set(WINDOW_FNS)


@pytest.mark.parametrize("window, shape, context_free, grid", [
    (TumblingWindow(10, 3), WindowShape.TUMBLING, True, (10, 10, 3)),
    (SlidingWindow(10, 4, 1), WindowShape.SLIDING, True, (10, 4, 1)),
    (SessionWindow(5), WindowShape.SESSION, False, None),
    (GlobalWindow(), WindowShape.GLOBAL, True, None),
])
def test_windows_declare_shape_and_capabilities(window, shape, context_free, grid):
    assert (window.shape, window.context_free, window.grid, window.measure) == (shape, context_free, grid, "time")


def test_a_window_without_a_shape_is_refused_by_both_engines():
    class Shapeless(Window):
        __slots__ = ()

    with pytest.raises(TypeError, match="expected a windowing window"):
        compile_window(Shapeless())
    with pytest.raises(TypeError, match="expected a windowing window"):
        compile_window_fn(Shapeless())


# --------------------------------------------------------------------------- aggregations
@pytest.mark.parametrize("fn, components, columns", [
    (Sum(), ("sum",), [("sum", "double")]),
    (Count(), ("count",), [("count", "bigint")]),
    (Mean(), ("sum", "count"), [("mean", "double")]),
    (Min(), ("min",), [("min", "double")]),
    (Max(), ("max",), [("max", "double")]),
    (M4(), ("min", "max", "first", "last"),
     [("m4_min", "double"), ("m4_max", "double"), ("m4_first", "double"), ("m4_last", "double")]),
    (Quantile(0.9), ("sorted_values",), [("quantile_0_9", "double")]),
    (Quantile((0.1, 0.9)), ("sorted_values",), [("quantile_0_1_0_9", "array<double>")]),
    (Median(), ("sorted_values",), [("median", "double")]),
    (ToList(), (), [("to_list", "array<double>")]),
])
def test_aggregations_declare_components_and_spark_columns(fn, components, columns):
    assert (fn.vectorised.components if fn.vectorised else ()) == components
    assert aggregation_columns([fn]) == columns
    assert is_builtin(fn) == bool(components)


def test_components_compute_the_result():
    parts = {"sum": np.array([6.0, 4.0]), "count": np.array([3, 4]), "min": np.array([1.0, 0.0]),
             "max": np.array([3.0, 2.0]), "first": np.array([2.0, 1.0]), "last": np.array([1.0, 2.0])}
    assert Mean().from_components(parts).tolist() == [2.0, 1.0]
    assert Count().from_components(parts).tolist() == [3, 4]
    assert M4().from_components(parts).tolist() == [[1.0, 3.0, 2.0, 1.0], [0.0, 2.0, 1.0, 2.0]]


def test_a_subclass_runs_its_own_methods_unless_it_declares_vectorised_again():
    class Doubled(Sum):                  # redefines how values combine: the sum kernel would be wrong
        def add_input(self, accumulator, value):
            return accumulator + 2 * value

    class DeclaredDoubled(Doubled):      # ... unless it says what it is computed from
        vectorised = Vectorised(("sum",))

    class Total(Sum):                    # only renames the result: keeps the kernel
        @property
        def name(self):
            return "total"

    assert Doubled.vectorised is None and not is_builtin(Doubled())
    assert is_builtin(DeclaredDoubled()) and Total().vectorised == Sum().vectorised and is_builtin(Total())
    op = SlicingWindowOperator([TumblingWindow(10)], [Doubled(), Total()], emission="compact")
    op.process_elements(np.array([1, 2]), np.array([1, 2]))
    assert [tuple(r.values) for r in op.process_watermark(10)] == [(6, 3)]


def test_the_old_components_declaration_still_works_with_a_warning():
    with pytest.warns(DeprecationWarning, match=r"'components = \.\.\.' is deprecated"):
        class OldSum(Sum):
            components = ("sum",)
            keeps_integers = True

            def add_input(self, accumulator, value):
                return accumulator + value

    assert OldSum.vectorised == Vectorised(("sum",), keeps_integers=True)


def test_a_vectorised_form_names_registered_components():
    with pytest.raises(KeyError, match="component 'sums': not registered"):
        Vectorised(("sums",))
    with pytest.raises(ValueError, match="a holistic component comes alone"):
        Vectorised(("sorted_values", "count"))


def test_a_user_aggregation_declares_its_spark_type_or_is_json_text():
    class Concat(AggregateFunction):
        def lift(self, v):
            return str(v)

        def combine(self, a, b):
            return a + b

    class Longest(Concat):
        spark_type = "bigint"

    assert aggregation_columns([Concat(), Longest()]) == [("concat", "string"), ("longest", "bigint")]


# --------------------------------------------------------------------------- a new component
#: The one edit a new vectorised component needs: its registration (in any module).
SUM_OF_SQUARES = register_component(Reduced("test_sum_of_squares", np.add, 0.0, lift=np.square, inverse=np.subtract))


class RootMeanSquare(AggregateFunction):
    """An aggregation over a component added in this file: its lift / combine / lower, and its
    vectorised form over the new ``test_sum_of_squares`` and the registered ``count``."""

    vectorised = Vectorised(("test_sum_of_squares", "count"))
    invert = staticmethod(lambda a, b: (a[0] - b[0], a[1] - b[1]))

    def lift(self, v):
        return (float(v) ** 2, 1)

    def combine(self, a, b):
        return (a[0] + b[0], a[1] + b[1])

    def lower(self, a):
        return (a[0] / a[1]) ** 0.5

    def from_components(self, parts):
        return np.sqrt(parts["test_sum_of_squares"] / parts["count"])


class PerRecordRms(RootMeanSquare):
    """The same aggregation without its vectorised form: the reference, per record in Python."""

    vectorised = None


@pytest.mark.parametrize("store", ["lazy", "eager"])
def test_a_component_registered_in_one_place_runs_in_both_kernels(store):
    """One ``register_component`` call, and no edit of the slicer: the per-key kernel
    (``ComponentKernel``, lazy and eager store) and the table of all keys
    (``KeyedSlicingOperator``) compute the new component; both equal lift / combine / lower."""
    from dataflow_kafka.slicer._kernels import ComponentKernel
    from dataflow_kafka.slicer.compile import kernel_for
    from dataflow_kafka.slicer.keyed import KeyedSlicingOperator

    assert isinstance(kernel_for(RootMeanSquare()), ComponentKernel)
    rng = np.random.default_rng(3)
    values, times = rng.integers(-9, 9, 300).astype(float), rng.integers(0, 1_000, 300)
    windows = [TumblingWindow(100), SlidingWindow(200, 50)]

    def per_key(fn):
        op = SlicingWindowOperator(windows, [fn], allowed_lateness_ms=1_000, store=store, emission="compact")
        op.process_elements(values, times)
        return {(r.query_id, r.start, r.end): r.value for r in op.process_watermark(1_000)}

    vectorised, reference = per_key(RootMeanSquare()), per_key(PerRecordRms())
    assert vectorised.keys() == reference.keys() and len(reference) > 10
    assert all(np.isclose(vectorised[k], reference[k]) for k in reference)

    template = SlicingWindowOperator(windows, [RootMeanSquare()], allowed_lateness_ms=1_000, emission="compact",
                                     drop_before_watermark=False)
    assert KeyedSlicingOperator.supports(template)
    keyed = KeyedSlicingOperator(template)
    keyed.process_elements(keyed.codes_of(["k"])[np.zeros(300, np.int64)], values, times)
    keys, res = keyed.process_watermark(1_000)
    table = {(str(q), int(s), int(e)): float(v) for q, s, e, v in zip(res.query_id, res.start, res.end, res.values[0])}
    assert table.keys() == reference.keys() and all(np.isclose(table[k], reference[k]) for k in reference)


def test_a_registered_reduced_component_runs_in_the_keyed_session_table():
    """The session table of all keys (``KeyedSessionOperator``) reads the same registry: the new
    component runs there with no edit of it, equal to lift / combine / lower per key; a picked
    component (M4's first and last) is not one a session row keeps."""
    from dataflow_kafka.slicer.keyed_sessions import KeyedSessionOperator

    rng = np.random.default_rng(4)
    keys, values, times = rng.integers(0, 3, 300), rng.integers(-9, 9, 300).astype(float), rng.integers(0, 3_000, 300)

    def template(fn):
        return SlicingWindowOperator([SessionWindow(20)], [fn], allowed_lateness_ms=5_000, emission="compact",
                                     drop_before_watermark=False)

    reference = {}
    for k in range(3):
        op = template(PerRecordRms())
        op.process_elements(values[keys == k], times[keys == k])
        reference.update({(k, r.start, r.end): r.value for r in op.process_watermark(5_000)})

    assert KeyedSessionOperator.supports(template(RootMeanSquare())) and not KeyedSessionOperator.supports(template(M4()))
    table = KeyedSessionOperator(template(RootMeanSquare()))
    table.process_elements(table.codes_of([0, 1, 2])[keys], values, times)
    got_keys, res = table.process_watermark(5_000)
    got = {(int(k), int(s), int(e)): float(v) for k, s, e, v in zip(got_keys, res.start, res.end, res.values[0])}
    assert got.keys() == reference.keys() and len(reference) > 10
    assert all(np.isclose(got[k], reference[k]) for k in reference)
