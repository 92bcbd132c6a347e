"""The stage protocol: what an engine adapter implements once to run in any pipeline.

A :class:`Stage` is a small picklable object holding the logic of one keyed operator (a slicer,
a Dataflow trigger, an optimistic stage, ...). Per micro-batch and key group it gets a
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

How a stage gets its input
--------------------------
- **Column inputs** (:meth:`Stage.inputs` and :meth:`Stage.key_columns`): named input columns
  given as SQL expressions over the upstream rows (the source's, or the previous stage's), which
  Spark evaluates before the shuffle; the key columns are hashed in the JVM. A stage whose inputs
  are plain column names of the previous stage's output, keyed by that stage's output key
  columns, is *fused* with it: it runs in the same processor, without a shuffle.
- **Python routing** (:meth:`Stage.python_router`): a function of the upstream data (a frame, or
  the upstream stage's native output) returning the rows to send and their key groups (computed
  with :func:`keygroups.key_group_of`, the same function the JVM computes). It runs in the
  upstream processor, or in a ``mapInPandas`` step after the source.
- **Several inputs** (:meth:`Stage.stage_inputs`, e.g. a join): named :class:`Input` s, each with
  its own column expressions (the key columns under the same names in every input) and its rows
  (``select``/``where`` on the upstream's data rows). The layer unions the inputs' rows with an
  ``input`` column, routes them by the one routing function, and gives the stage the low
  watermark of each input (``StageInput.input_watermarks``) and their minimum (``watermark_ms``).
  Such a stage starts an operator; :meth:`keygroups.Pipeline.join` says where each input comes from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import pandas as pd

from dataflow_kafka.keygroups.contract import Modification
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["Stage", "StageInput", "StageOutput", "Dropped", "PythonRouter", "Input", "INPUT_COLUMN"]

#: The column that tags a multi-input stage's rows with the name of their input.
INPUT_COLUMN = "input"

#: ``router(upstream_data) -> (rows as a frame, key group per row)``
PythonRouter = Callable[[Any], tuple[pd.DataFrame, Any]]


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
    """One input of a multi-input stage (:meth:`Stage.stage_inputs`).

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


class Stage:
    """Base class of a stage's logic. Subclasses are picklable values (no Spark objects).

    Set ``name`` (unique in a pipeline; the builder fills a default) and ``num_key_groups``.
    """

    name: str | None = None
    num_key_groups: int = 4
    #: Control commands (their ``op``) this stage acts on. The pipeline's first operator reports a
    #: command that no stage of the query takes (or that names a stage not in it) as an ``error`` row.
    commands: frozenset = frozenset()

    # -- input ------------------------------------------------------------------------------------
    def inputs(self) -> dict[str, str]:
        """Input columns: ``{name: SQL expression over the upstream rows}`` (column inputs)."""
        return {}

    def key_columns(self) -> list[str] | None:
        """Names among :meth:`inputs` that form the key (column inputs), or None."""
        return None

    def stage_inputs(self) -> "tuple[Input, ...] | None":
        """Several inputs: one :class:`Input` per input (the key columns are :meth:`key_columns`,
        present in each). None (default): one input, given by :meth:`inputs` or the router."""
        return None

    def python_router(self) -> PythonRouter | None:
        """A Python router (Python routing) instead of column inputs; see the module docstring."""
        return None

    def routed_columns(self) -> list[tuple[str, str]]:
        """Python routing: the (name, Spark DDL type) columns of the rows the router returns."""
        return []

    def key_group_ids(self) -> list[int] | None:
        """Python routing: the grouping values the router returns when they are not
        ``0..num_key_groups-1`` (e.g. slots placed on chosen shuffle partitions,
        :mod:`keygroups.slots`): markers go to each, error/report rows to the first. None: the range."""
        return None

    def fused_input(self, upstream_data: Any) -> tuple[Any, Any]:
        """Python routing, fused after another stage: ``(this stage's input data, key group per
        row)`` from the previous stage's native output (default: the router). Override to skip a
        frame round trip (e.g. hand over Python objects)."""
        return self.python_router()(upstream_data)

    def fusable_after(self, upstream: "Stage") -> bool:
        """Python routing: whether this stage's key is ``upstream``'s, so it can run fused after it."""
        return False

    def followed_by(self, downstream: "Stage | None") -> "Stage":
        """This stage as configured for a pipeline where ``downstream`` follows it (None: the last
        stage). Returns ``self`` or a configured copy (e.g. an optimistic stage adds the barrier
        when no optimistic stage follows)."""
        return self

    def bind(self, input_types: dict[str, str]) -> "Stage":
        """This stage for inputs of these Spark types (``{input name: DDL type}``), e.g. to give its
        key output columns the key's type. Called by :meth:`Pipeline.apply`; default ``self``."""
        return self

    # -- output -----------------------------------------------------------------------------------
    def output_columns(self) -> list[tuple[str, str]]:
        """Data columns of the output rows (besides the contract's ``event_time_ms``)."""
        raise NotImplementedError

    def output_key_columns(self) -> list[str] | None:
        """Output columns that carry this stage's key unchanged (a stage keyed by exactly these
        columns, with the same number of key groups, can be fused after this one)."""
        return None

    def output_frame(self, data: Any) -> pd.DataFrame | None:
        """This stage's native output data as a frame of ``event_time_ms`` + :meth:`output_columns`."""
        return data

    # -- state and processing ---------------------------------------------------------------------
    def new_state(self) -> Any:
        raise NotImplementedError

    def dump_state(self, state: Any) -> bytes:
        raise NotImplementedError

    def load_state(self, blob: bytes) -> Any:
        raise NotImplementedError

    def process(self, state: Any, batch: StageInput) -> StageOutput:
        """One micro-batch of one key group: apply ``batch.modifications`` (those meant for this
        stage), then the data, then advance to ``batch.watermark_ms``; mutate ``state``."""
        raise NotImplementedError

    def then(self, other: "Stage", fuse: bool | None = None):
        """A :class:`~keygroups.pipeline.Pipeline` of this stage followed by ``other``."""
        from dataflow_kafka.keygroups.pipeline import Pipeline

        return Pipeline([self]).then(other, fuse=fuse)

    def __rshift__(self, other: "Stage"):
        return self.then(other)
