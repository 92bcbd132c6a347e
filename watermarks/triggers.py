"""Triggers: *when* in processing time a window's results are emitted (Dataflow §2.3).

Windowing says where in event time data are grouped; a trigger says when the grouped result
of a window is emitted as a **pane** (the Dataflow Model, Akidau et al., VLDB 2015, §2.3 Triggers &
Incremental Processing, §2.4 Examples). Triggers react
to the watermark passing the end of the window, to processing time, and to data arriving, and
compose into trees: sequences, repetition, "any", "all", "until".

Triggers here are immutable values (``==``, ``hash``, readable ``repr``) and hold no state.
The per-window state they need (counts, processing-time deadlines, which step of a sequence is
active, which children finished) lives in the driver, in slots allocated when the driver builds
the trigger's runtime (see ``watermarks._trigger_runtime``); each slot declares how it merges
when session windows merge (counts add, deadlines take the earliest, progress the least).

Names follow Apache Beam, so that Beam pipelines port; they are dataflow-kafka's names:

=============================  =============================================================
Beam name                      fires
=============================  =============================================================
``AfterWatermark()``           once, when the watermark passes the end of the window
``AfterWatermark(early, late)``  ``early`` repeatedly before that, once at it, ``late``
                               repeatedly after it (for data within the allowed lateness)
``AfterCount(n)``              once, when ``n`` elements arrived in the pane
``AfterProcessingTime(d)``     once, ``d`` ms of processing time after the pane's first element
                               (``align_ms=p``: at the next multiple of ``p`` after that)
``Repeatedly(t)``              every time ``t`` fires; ``t`` restarts after each firing
``AfterEach(t1, t2, ...)``     ``t1`` until it finishes, then ``t2``, ...
``AfterAny(t1, t2, ...)``      when any child fires; finishes when a firing child finishes
``AfterAll(t1, t2, ...)``      when every child is ready
``OrFinally(t, until)``        as ``t``, and finishes (with a last firing) when ``until`` fires
``DefaultTrigger()``           at the watermark, then once for every late arrival
=============================  =============================================================

The paper's names (``AtWatermark``, ``AtCount``, ``AtPeriod``, ``SequenceOf``, ``Repeat``,
``RepeatUntil``) live in :mod:`dataflow_kafka.compat.dataflow_model`; importing them from here
still works, with a ``DeprecationWarning``.

Example: the trigger of the paper's Figure 13 (early every minute, on time, late each datum)

>>> AfterEach(OrFinally(Repeatedly(AfterProcessingTime(align_ms=60_000)), AfterWatermark()),
...           Repeatedly(AfterWatermark()))
AfterEach(OrFinally(Repeatedly(AfterProcessingTime(align_ms=60000)), AfterWatermark()), Repeatedly(AfterWatermark()))

A trigger that can *finish* closes its window: later data for it are dropped (and counted by
the driver). :func:`finishes` tells whether and when that can happen; the driver warns about
configurations that can drop data.
"""

from __future__ import annotations

from typing import Any

from dataflow_kafka.deprecation import Moved, moved_names
from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError

__all__ = [
    "Trigger",
    "AfterWatermark",
    "AfterCount",
    "AfterProcessingTime",
    "Repeatedly",
    "AfterEach",
    "AfterAny",
    "AfterAll",
    "OrFinally",
    "DefaultTrigger",
    "finishes",
    "counts_only",
]

NEVER, AT_WATERMARK, ANYTIME = "never", "at the watermark", "before the watermark"


class Trigger:
    """Base of trigger specifications: immutable, compared by value."""

    __slots__ = ("_args",)

    def __init__(self, **args: Any) -> None:
        object.__setattr__(self, "_args", tuple(args.items()))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __getattr__(self, name: str) -> Any:
        for k, v in object.__getattribute__(self, "_args"):
            if k == name:
                return v
        raise AttributeError(name)

    def __reduce__(self) -> tuple:
        return (_rebuild, (type(self), self._args))

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._args == other._args  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._args))

    def __repr__(self) -> str:
        parts = []
        for k, v in self._args:
            if k == "triggers":
                parts.extend(repr(t) for t in v)
            elif k in ("trigger", "until"):
                parts.append(repr(v))
            elif v is not None and not (k == "delay_ms" and v == 0):
                parts.append(f"{k}={v!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def _finish(self) -> str:
        """When this trigger can finish: NEVER, AT_WATERMARK or ANYTIME."""
        raise NotImplementedError


def _rebuild(cls: type, args: tuple) -> Trigger:
    t = object.__new__(cls)
    object.__setattr__(t, "_args", args)
    return t


def _trigger(name: str, value: Any) -> Trigger:
    if not isinstance(value, Trigger):
        raise ArgumentTypeError(f"{name} must be a Trigger, got {value!r}")
    return value


def _earliest(kinds: list[str]) -> str:
    for kind in (ANYTIME, AT_WATERMARK):
        if kind in kinds:
            return kind
    return NEVER


class AfterWatermark(Trigger):
    """Fire when the watermark passes the end of the window, with optional early/late firings.

    ``early`` and ``late`` are repeated (as in Beam). Without ``late`` the trigger finishes at
    the watermark and data arriving later (within the allowed lateness) are dropped.
    """

    __slots__ = ()

    def __init__(self, early: Trigger | None = None, late: Trigger | None = None) -> None:
        if early is not None:
            _trigger("early", early)
        if late is not None:
            _trigger("late", late)
        super().__init__(early=early, late=late)

    def _finish(self) -> str:
        return NEVER if self.late is not None else AT_WATERMARK


class AfterCount(Trigger):
    """Fire once when at least ``count`` elements arrived since the pane started."""

    __slots__ = ()

    def __init__(self, count: int) -> None:
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise InvalidArgumentError(f"AfterCount count must be an integer >= 1, got {count!r}")
        super().__init__(count=count)

    def __repr__(self) -> str:
        return f"AfterCount({self.count})"

    def _finish(self) -> str:
        return ANYTIME


class AfterProcessingTime(Trigger):
    """Fire once, ``delay_ms`` of processing time after the first element of the pane.

    With ``align_ms=p`` the deadline is rounded up to the next multiple of ``p`` strictly after
    ``first element time + delay_ms``: firings fall on periodic boundaries (the paper's AtPeriod).
    """

    __slots__ = ()

    def __init__(self, delay_ms: int = 0, *, align_ms: int | None = None) -> None:
        if not isinstance(delay_ms, int) or delay_ms < 0:
            raise InvalidArgumentError(f"AfterProcessingTime delay_ms must be an integer >= 0, got {delay_ms!r}")
        if align_ms is not None and (not isinstance(align_ms, int) or align_ms <= 0):
            raise InvalidArgumentError(f"AfterProcessingTime align_ms must be a positive integer or None, got {align_ms!r}")
        super().__init__(delay_ms=delay_ms, align_ms=align_ms)

    def _finish(self) -> str:
        return ANYTIME


class Repeatedly(Trigger):
    """Fire every time ``trigger`` fires, restarting it after each firing; never finishes."""

    __slots__ = ()

    def __init__(self, trigger: Trigger) -> None:
        super().__init__(trigger=_trigger("trigger", trigger))

    def _finish(self) -> str:
        return NEVER


class _Composite(Trigger):
    __slots__ = ()

    def __init__(self, *triggers: Trigger) -> None:
        if not triggers:
            raise InvalidArgumentError(f"{type(self).__name__} needs at least one trigger")
        for i, t in enumerate(triggers):
            _trigger(f"{type(self).__name__} argument {i}", t)
        super().__init__(triggers=tuple(triggers))


class AfterEach(_Composite):
    """Run the triggers in sequence: each fires until it finishes, then the next takes over."""

    __slots__ = ()

    def _finish(self) -> str:
        kinds = [t._finish() for t in self.triggers]
        return NEVER if NEVER in kinds else kinds[-1]


class AfterAny(_Composite):
    """Fire when any child fires; finish when a child that fired finishes."""

    __slots__ = ()

    def _finish(self) -> str:
        return _earliest([t._finish() for t in self.triggers])


class AfterAll(_Composite):
    """Fire when every child is ready to fire; finish when all children finished."""

    __slots__ = ()

    def _finish(self) -> str:
        kinds = [t._finish() for t in self.triggers]
        return NEVER if NEVER in kinds else (AT_WATERMARK if AT_WATERMARK in kinds else ANYTIME)


class OrFinally(Trigger):
    """Fire as ``trigger`` does; when ``until`` fires, fire a last time and finish."""

    __slots__ = ()

    def __init__(self, trigger: Trigger, until: Trigger) -> None:
        super().__init__(trigger=_trigger("trigger", trigger), until=_trigger("until", until))

    def _finish(self) -> str:
        return _earliest([self.trigger._finish(), self.until._finish()])


class DefaultTrigger(Trigger):
    """Fire when the watermark passes the end of the window, then for every late arrival.

    Equivalent to the paper's ``Repeat(AtWatermark())`` (§2.4).
    """

    __slots__ = ()

    def _finish(self) -> str:
        return NEVER


def finishes(trigger: Trigger) -> str:
    """``"never"``, ``"at the watermark"`` or ``"before the watermark"``: when it can finish."""
    return _trigger("trigger", trigger)._finish()


def counts_only(trigger: Trigger) -> bool:
    """Whether ``trigger`` is ``DefaultTrigger()`` or an ``AfterWatermark`` whose early and late
    firings are each absent or an ``AfterCount`` (§2.4's early / on-time / late firings): what the
    vectorised driver runs. Such a trigger never reads processing time, and a window it asked is
    not ready again before an element or the watermark reaches it."""
    if type(trigger) is DefaultTrigger:
        return True
    return type(trigger) is AfterWatermark and all(t is None or type(t) is AfterCount
                                                   for t in (trigger.early, trigger.late))


#: The paper's names (§2.4): their one home is dataflow_kafka.compat.dataflow_model.
MOVED = {old: Moved("dataflow_kafka.compat.dataflow_model", old, f"it is the Dataflow paper's name for {new}")
         for old, new in (("AtWatermark", "AfterWatermark"), ("AtCount", "AfterCount"), ("SequenceOf", "AfterEach"),
                          ("Repeat", "Repeatedly"), ("AtPeriod", "AfterProcessingTime(align_ms=...)"),
                          ("RepeatUntil", "OrFinally(Repeatedly(...), ...)"))}
__getattr__ = moved_names(__name__, MOVED)
