"""The stage protocol: what an engine adapter implements once to run in any pipeline.

A stage (:class:`keygroups.Stage`, with the hooks of :class:`StageLogic`) is a small picklable
object holding the logic of one keyed operator (a slicer, a Dataflow trigger, an optimistic stage, ...). Per micro-batch and key group it gets a
:class:`StageInput` (data rows, modification punctuations, the input low watermark, the batch's
processing time) and returns a :class:`StageOutput` (data rows, its **output low watermark**,
reports). The framework (:mod:`keygroups.processor`, :mod:`keygroups.pipeline`) does the rest
the same way for every engine: routing, state (one read and write per key group and batch),
modification deduplication and forwarding, punctuation folding (min over senders) and
forwarding, fusion of consecutive stages keyed by the same key group, and the local runner.

The output low watermark (Beam's *output watermark hold*) is the promise "no data row this key
group emits later has an event time below it": for a windowing stage, the earliest end of a
window it may still emit or update (minus one, the window's last instant); for an optimistic
barrier, its release bound. The framework keeps it monotone and sends it downstream as a
punctuation row after the batch's data rows.

A stage implements four hooks (abstract: a subclass missing one cannot be instantiated):
:meth:`StageLogic.routing`, :meth:`StageLogic.output_columns`, :meth:`StageLogic.new_state` and
:meth:`StageLogic.process`; the state codec has a default (pickle), every other hook a default that
suits most stages. A worked example: :mod:`keygroups.examples`.

How a stage gets its input: :meth:`StageLogic.routing`, one value
-----------------------------------------------------------------
- **the key column(s)** (a name or a list of names among :meth:`StageLogic.inputs`): named input
  columns given as SQL expressions over the upstream rows (the source's, or the previous
  stage's), which Spark evaluates before the shuffle; the key columns are hashed in the JVM. A
  stage whose inputs are plain column names of the previous stage's output, keyed by that stage's
  output key columns, is *fused* with it: it runs in the same processor, without a shuffle.
- **a** :class:`PythonRouter`: a function of the upstream data (a frame, or the upstream stage's
  native output) returning the rows to send and their key groups (computed with
  :func:`keygroups.key_group_of`, the same function the JVM computes), with the columns of those
  rows. It runs in the upstream processor, or in a ``mapInPandas`` step after the source.
- **Several inputs** (:meth:`StageLogic.stage_inputs`, e.g. a join; ``routing()`` names the key
  columns): named :class:`Input` s, each with its own column expressions (the key columns under
  the same names in every input) and its rows (``select``/``where`` on the upstream's data rows).
  The layer unions the inputs' rows with an ``input`` column, routes them by the one routing
  function, and gives the stage the low watermark of each input (``StageInput.input_watermarks``)
  and their minimum (``watermark_ms``). Such a stage starts an operator;
  :meth:`keygroups.Pipeline.join` says where each input comes from.

The hooks are :class:`StageLogic`'s, which the stage layer runs; an engine subclasses
:class:`keygroups.Stage` (:mod:`keygroups.pipeline`), the same hooks and composition
(``then``, ``>>``) into a :class:`keygroups.Pipeline`. This module imports only the row contract.
"""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from dataflow_kafka.keygroups.contract import Modification
from dataflow_kafka.errors import InvalidArgumentError, PlanError

__all__ = ["StageLogic", "StageInput", "StageOutput", "Dropped", "PythonRouter", "Input", "INPUT_COLUMN",
           "key_columns_of", "router_of", "group_ids_of", "check_routing"]

#: The column that tags a multi-input stage's rows with the name of their input.
INPUT_COLUMN = "input"


@dataclass(frozen=True, eq=False)
class PythonRouter:
    """Python routing (:meth:`StageLogic.routing`): a stage whose key is computed in Python.

    ``route(upstream_data) -> (rows, key group per row)``: the rows to send (a frame with
    ``event_time_ms`` and ``columns``) from the upstream data (source rows as a frame, or the
    previous stage's native output), and each row's key group (:func:`keygroups.key_group_of`).
    ``columns``: ``(name, Spark DDL type)`` of those rows' data columns.
    ``group_ids``: the grouping values ``route`` returns when they are not
    ``0..num_key_groups-1`` (e.g. slots placed on chosen shuffle partitions,
    :mod:`balancing.slots`): markers go to each, error and report rows to the first.
    ``fused``: ``fused(upstream native data) -> (this stage's input data, key group per row)``
    when the stage runs fused after another (default ``route``); hand over Python objects
    instead of a frame round trip.
    ``fusable_after``: ``fusable_after(upstream stage) -> bool``, whether this stage's key is
    that stage's, so it can run fused after it (default: never).

    Calling the router routes: ``router(data)`` is ``router.route(data)``.
    """

    route: Callable[[Any], tuple[pd.DataFrame, Any]]
    columns: Sequence[tuple[str, str]] = ()
    group_ids: Sequence[int] | None = None
    fused: Callable[[Any], tuple[Any, Any]] | None = None
    fusable_after: Callable[["StageLogic"], bool] | None = None

    def __post_init__(self) -> None:
        if not callable(self.route):
            raise InvalidArgumentError(f"PythonRouter: route={self.route!r} is not callable")
        object.__setattr__(self, "columns", tuple(tuple(c) for c in self.columns))
        if self.group_ids is not None:
            object.__setattr__(self, "group_ids", tuple(int(g) for g in self.group_ids))

    def __call__(self, data: Any) -> tuple[pd.DataFrame, Any]:
        return self.route(data)

    def fused_input(self, upstream_data: Any) -> tuple[Any, Any]:
        """``(input data, key group per row)`` of the stage fused after another (``fused`` or ``route``)."""
        return (self.fused or self.route)(upstream_data)


@dataclass
class StageInput:
    """What one micro-batch brings to one stage in one key group."""

    key_group: int
    data: Any                               # a frame with event_time_ms (or an upstream stage's native data)
    modifications: list[Modification]       # new this batch, in control-topic order
    watermark_ms: int | None                # input low watermark after this batch
    previous_watermark_ms: int | None       # ... after the previous batch
    processing_time_ms: int | None          # recorded in the source offset (same on replay)
    #: a multi-input stage: each input's low watermark (``watermark_ms`` is their minimum); else None
    input_watermarks: dict[str, int | None] | None = None


@dataclass(frozen=True)
class Input:
    """One input of a multi-input stage (:meth:`StageLogic.stage_inputs`).

    ``name``: the input's name (unique in the stage; the ``input`` column of its rows).
    ``columns``: ``{column: SQL expression or keygroups.Computed}`` over the upstream's rows,
    the stage's key columns included (same names in every input, same types: one routing).
    ``select``: ``{column: value}``, only data rows with these values (e.g. ``{"topic":
    "persons"}``: one source whose rows are split by topic); evaluated by both runners.
    ``where``: a SQL predicate (Spark only), a boolean column's name or a ``Computed(fn, "boolean")``
    (both runners).
    Punctuation and modification rows of the upstream reach every input reading it.
    """

    name: str
    columns: Mapping[str, Any]
    select: Mapping[str, Any] | None = None
    where: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgumentError(f"Input name={self.name!r}: expected a non-empty string")
        if not isinstance(self.columns, Mapping) or not self.columns:
            raise InvalidArgumentError(f"Input {self.name!r}: columns={self.columns!r}: expected a non-empty dict "
                             "{column: SQL expression or keygroups.Computed}")
        if self.select is not None and not isinstance(self.select, Mapping):
            raise InvalidArgumentError(f"Input {self.name!r}: select={self.select!r}: expected a dict {{column: value}}")
        object.__setattr__(self, "columns", dict(self.columns))
        if self.select is not None:
            object.__setattr__(self, "select", dict(self.select))

    def __hash__(self) -> int:
        return hash((self.name, tuple(self.columns), tuple(self.select or ())))


@dataclass(frozen=True)
class Dropped:
    """Records of ``key`` a stage did not use in this batch, and why (``late``, ``null``, ``closed``)."""

    key: Any
    reason: str
    count: int


@dataclass
class StageOutput:
    """What a stage produced for one key group and batch."""

    data: Any = None                        # a frame with event_time_ms + output columns, or native data
    watermark_ms: int | None = None         # output low watermark (hold) after this batch
    dropped: list[Dropped] = field(default_factory=list)
    metrics: dict | None = None             # counters for a ``metrics`` row (JSON-serialisable)
    errors: list[str] = field(default_factory=list)   # input it could not use, reported by this key group
    #: Control commands it could not use (malformed, or invalid for the stage's configuration):
    #: every key group meets the same commands, so they are reported once per operator, by the key
    #: group that forwards the modifications.
    command_errors: list[str] = field(default_factory=list)


class StageLogic(ABC):
    """The hooks of a stage, what the stage layer runs. Subclasses are picklable values (no Spark
    objects); an engine subclasses :class:`keygroups.Stage`, which adds composition.

    Required (abstract): :meth:`routing`, :meth:`output_columns`, :meth:`new_state`,
    :meth:`process`. Set ``name`` (unique in a pipeline; the builder fills a default) and
    ``num_key_groups``. Example: :class:`keygroups.examples.RunningCount`.
    """

    name: str | None = None
    num_key_groups: int = 4
    #: Control commands (their ``op``) this stage acts on. The pipeline's first operator reports a
    #: command that no stage of the query takes (or that names a stage not in it) as an ``error`` row.
    commands: frozenset = frozenset()

    # -- input ------------------------------------------------------------------------------------
    @abstractmethod
    def routing(self) -> "str | Sequence[str] | PythonRouter":
        """How rows reach this stage's key groups: the key column name(s) among :meth:`inputs`
        (among every input's columns for a multi-input stage), hashed by the one routing function;
        or a :class:`PythonRouter` (keys computed in Python). See the module docstring."""

    def inputs(self) -> Mapping[str, Any]:
        """Input columns: ``{name: SQL expression over the upstream rows, or keygroups.Computed}``
        (column routing; the key columns among them)."""
        return {}

    def stage_inputs(self) -> "tuple[Input, ...] | None":
        """Several inputs: one :class:`Input` per input (the key columns of :meth:`routing`,
        present in each). None (default): one input, given by :meth:`inputs` or the router."""
        return None

    def before_shuffle(self) -> "Callable | None":
        """A stateless step for the source's tasks when this stage starts the first operator and
        they pack its rows (``keyGroupPacking``): ``step(payload, kinds, bound_ms)`` gets the
        payload columns (a ``pyarrow.Table``, ``kind`` as a numpy array) and the newest data event
        time the source read before the micro-batch (None: not known), and returns which rows to
        send (a bool array; None: all). Its rows must give the same output as all of them
        (:class:`watermarks.before_shuffle.RowSelection`). None (default): no such step."""
        return None

    def followed_by(self, downstream: "StageLogic | None") -> "StageLogic":
        """This stage as configured for a pipeline where ``downstream`` follows it (None: the last
        stage). Returns ``self`` or a configured copy (e.g. an optimistic stage adds the barrier
        when no optimistic stage follows)."""
        return self

    def bind(self, input_types: dict[str, str]) -> "StageLogic":
        """This stage for inputs of these Spark types (``{input name: DDL type}``), e.g. to give its
        key output columns the key's type. Called by :meth:`Pipeline.apply`; default ``self``."""
        return self

    # -- output -----------------------------------------------------------------------------------
    @abstractmethod
    def output_columns(self) -> list[tuple[str, str]]:
        """Data columns of the output rows, ``(name, Spark DDL type)`` (besides the contract's
        ``event_time_ms``)."""

    def output_key_columns(self) -> list[str] | None:
        """Output columns that carry this stage's key unchanged (a stage keyed by exactly these
        columns, with the same number of key groups, can be fused after this one)."""
        return None

    def output_frame(self, data: Any) -> pd.DataFrame | None:
        """This stage's native output data as a frame of ``event_time_ms`` + :meth:`output_columns`."""
        return data

    # -- state and processing ---------------------------------------------------------------------
    @abstractmethod
    def new_state(self) -> Any:
        """A key group's initial state (any value :meth:`dump_state` can write)."""

    def dump_state(self, state: Any) -> bytes:
        """A key group's state as bytes, written to Spark's state store once per batch. Default:
        pickle (the operator pickles its own state too; the state store is as trusted as the
        checkpoint). Override for a compact or versioned format, or for state pickle cannot write."""
        return pickle.dumps(state, protocol=5)

    def load_state(self, blob: bytes) -> Any:
        """The state :meth:`dump_state` wrote (default: unpickled)."""
        return pickle.loads(bytes(blob))

    def dump_state_logged(self, state: Any) -> tuple[bytes, dict[int, bytes], list[int]]:
        """A key group's state as bytes without its append-only part, and that part's changes since
        the last call as a log: ``(bytes, new segments {id: bytes}, ids of segments to delete)``.
        On Spark the bytes go to the key group's value state and the segments to a map state, so
        a part that only grows is written once, not every batch (:mod:`keygroups.operator`).
        Default: no log (:meth:`dump_state`)."""
        return self.dump_state(state), {}, []

    def load_state_logged(self, blob: bytes, segments: Mapping[int, bytes]) -> Any:
        """The state :meth:`dump_state_logged` wrote, with every segment not deleted (default:
        :meth:`load_state`). ``segments`` reads the state store when it is first looked into: a
        stage may keep it and look only when it needs the segments, within this call."""
        return self.load_state(blob)

    def attach_log(self, state: Any, segments: Mapping[int, bytes]) -> None:
        """A live state kept from an earlier micro-batch (not loaded again) gets this call's
        ``segments``, for a stage that keeps them to read later (default: nothing)."""

    def describe_state(self, state: Any) -> Any:
        """What a key group's state holds, for people (:func:`keygroups.state_view.read_state`):
        one row per item (:func:`keygroups.state_view.state_item`: ``item`` such as ``window``,
        ``slice``, ``held``, ``query``; ``key``, ``query_id``, ``start_ms``, ``end_ms``,
        ``count``; any other field is detail), as a list of dicts or a DataFrame of those
        columns. Default: one ``state`` row holding the state (its ``repr`` shown); the engines
        describe their windows, slices and held records."""
        return [{"item": "state", "state": state}]

    @abstractmethod
    def process(self, state: Any, batch: StageInput) -> StageOutput:
        """One micro-batch of one key group: apply ``batch.modifications`` (those meant for this
        stage), then the data, then advance to ``batch.watermark_ms``; mutate ``state``."""

    # -- results ----------------------------------------------------------------------------------
    def current_results(self, frames: Sequence[pd.DataFrame], kind: str = "data") -> pd.DataFrame:
        """The current results after this stage's output ``frames`` (one per batch, in order), one
        row per result (``dataflow_kafka.current_results``): a windowing stage's one row per window,
        a join's one row per joined pair. Default: refused, for a stage whose rows are no results
        to fold (its data rows are the output as they are)."""
        raise InvalidArgumentError(f"stage {self.name!r} ({type(self).__name__}) has no results to fold: its data "
                                   "rows are its output as they come")


# -- routing, as the layer reads it -----------------------------------------------------------------

def router_of(stage: StageLogic) -> PythonRouter | None:
    """``stage``'s :class:`PythonRouter`, or None when it routes by key columns."""
    r = stage.routing()
    return r if isinstance(r, PythonRouter) else None


def key_columns_of(stage: StageLogic) -> list[str] | None:
    """``stage``'s key columns (column routing), or None when it routes in Python; a routing
    that is neither is refused, naming the stage."""
    r = stage.routing()
    if isinstance(r, PythonRouter):
        return None
    keys = [r] if isinstance(r, str) else list(r) if isinstance(r, (list, tuple)) else None
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise PlanError(f"stage {stage.name!r} ({type(stage).__name__}): routing() returned {r!r}; expected the key "
                        "column name(s) among its inputs() or a keygroups.PythonRouter")
    return keys


def check_routing(stage: StageLogic) -> None:
    """Refuse, naming the stage, a routing that is neither a router nor key columns, or key
    columns that are not among its inputs (each input's, for a multi-input stage)."""
    keys = key_columns_of(stage)
    if keys is None:
        return
    several = stage.stage_inputs()
    for name, columns in ([(f"input {i.name!r}", i.columns) for i in several] if several
                          else [("inputs()", stage.inputs())]):
        missing = [k for k in keys if k not in columns]
        if missing:
            raise PlanError(f"stage {stage.name!r} ({type(stage).__name__}): its routing() key columns {missing} are not "
                            f"among {name} {sorted(columns)}")


def group_ids_of(stage: StageLogic) -> list[int] | None:
    """The grouping values of a Python-routed stage whose router names them (None: ``0..n-1``)."""
    r = router_of(stage)
    return list(r.group_ids) if r is not None and r.group_ids is not None else None
