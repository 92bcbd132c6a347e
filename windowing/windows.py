"""Window definitions both engines accept: tumbling, sliding, session, global.

A window definition is a small immutable value (validated when built, equal when its fields are
equal, readable ``repr``, JSON round trip). It says *where* in event time records are grouped;
each engine compiles it into its own runtime: the slicer into slice edges and contexts (Scotty
``seeds/scotty-slicing.txt`` §4.4, §5.4.2), the Dataflow driver into a ``WindowFn`` with
AssignWindows / MergeWindows (``seeds/dataflow-model.txt`` §2.2).

Conventions: a window ``[start, end)`` holds the records with ``start <= t < end``; times are
integer milliseconds (``*_ms``). ``measure="count"`` (slicer only) makes a tumbling or sliding
window count records instead: ``size_ms``, ``slide_ms`` and ``offset_ms`` are then record
positions in event-time order.

Scotty's constructor shapes take the measure first (:class:`WindowMeasure`):
``TumblingWindow(WindowMeasure.Time, 5000)``, ``SlidingWindow(WindowMeasure.Time, 2000, 1000)``,
``SessionWindow(WindowMeasure.Time, 2000)``; ours (size first, ``measure=`` keyword) stay.

Beam's names are aliases of the same classes: :data:`FixedWindows` is :class:`TumblingWindow`,
:data:`SlidingWindows` is :class:`SlidingWindow` (Beam's ``period_ms`` keyword works),
:data:`Sessions` is :class:`SessionWindow`, :data:`GlobalWindows` is :class:`GlobalWindow`.

Example
-------
>>> w = SlidingWindow(60_000, 10_000)
>>> w
SlidingWindow(size_ms=60000, slide_ms=10000, offset_ms=0)
>>> w.to_json()
{'type': 'sliding', 'size_ms': 60000, 'slide_ms': 10000, 'offset_ms': 0}
>>> window_from_json({"type": "sliding", "size_ms": 60000, "slide_ms": 10000}) == w
True
>>> FixedWindows(5_000) == TumblingWindow(5_000), SlidingWindows(10, period_ms=5)
(True, SlidingWindow(size_ms=10, slide_ms=5, offset_ms=0))
>>> TumblingWindow(WindowMeasure.Time, 5_000) == TumblingWindow(5_000), TumblingWindow(WindowMeasure.Count, 3)
(True, TumblingWindow(size_ms=3, offset_ms=0, measure='count'))
"""

from __future__ import annotations

import enum
import json
from typing import Any, ClassVar
from dataflow_kafka.errors import InvalidArgumentError

__all__ = [
    "BEGINNING_OF_TIME_MS", "END_OF_TIME_MS", "MEASURES", "WindowMeasure",
    "Window", "TumblingWindow", "SlidingWindow", "SessionWindow", "GlobalWindow",
    "FixedWindows", "SlidingWindows", "Sessions", "GlobalWindows", "window_from_json",
]

#: Earliest representable event time (about -285 000 years; exact in int64 and float64).
BEGINNING_OF_TIME_MS = -(2**53)
#: End of event time: a watermark at this value means "the input is complete".
END_OF_TIME_MS = 2**53
#: What the bounds of a tumbling or sliding window count.
MEASURES = ("time", "count")


class WindowMeasure(str, enum.Enum):
    """Scotty's ``WindowMeasure``: ``Time`` (event time, ms) or ``Count`` (records). Equal to the
    strings ``"time"`` and ``"count"`` that ``measure=`` takes."""

    Time = "time"
    Count = "count"

    def __repr__(self) -> str:
        return f"WindowMeasure.{self.name}"

    __str__ = str.__str__


def _scotty_args(cls: str, args: tuple, measure: str) -> tuple[tuple, str]:
    """Scotty's constructor shape ``(WindowMeasure, size, ...)``: the measure taken from the
    first argument, ours ``(size, ..., measure=)`` passed through."""
    if args and isinstance(args[0], WindowMeasure):
        if measure != "time":
            raise InvalidArgumentError(f"{cls}: measure given twice ({args[0]!r} and measure={measure!r})")
        return args[1:], args[0].value
    return args, measure


def _integer(cls: str, name: str, value: object, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high)``; else a ValueError quoting it."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    if ok and (low is None or value >= low) and (high is None or value < high):
        return int(value)
    if high is not None:
        want = f"an integer in [{low}, {high})"
    else:
        want = "a positive integer" if low == 1 else f"an integer >= {low}"
    raise InvalidArgumentError(f"{cls}: {name}={value!r}: expected {want}")


def _measure(cls: str, value: object) -> str:
    if value not in MEASURES:
        raise InvalidArgumentError(f"{cls}: measure={value!r}: expected 'time' or 'count'")
    return value.value if isinstance(value, WindowMeasure) else str(value)


class Window:
    """Base of the shared window definitions: immutable values with a JSON form."""

    __slots__ = ()
    #: The ``type`` of the JSON form.
    type_name: ClassVar[str] = ""
    _fields: ClassVar[tuple[str, ...]] = ()

    def _values(self) -> tuple:
        return tuple(getattr(self, f) for f in self._fields)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _set(self, **fields: Any) -> None:
        for k, v in fields.items():
            object.__setattr__(self, k, v)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._values()))

    def __repr__(self) -> str:
        shown = [f for f in self._fields if not (f == "measure" and getattr(self, f) == "time")]
        return f"{type(self).__name__}({', '.join(f'{f}={getattr(self, f)!r}' for f in shown)})"

    def __reduce__(self):
        return (_rebuild, (type(self), self._values()))

    def to_json(self) -> dict:
        """The JSON form: ``{"type": ..., <fields>}`` (``measure`` only when it is ``"count"``)."""
        out: dict[str, Any] = {"type": self.type_name}
        out.update((f, getattr(self, f)) for f in self._fields if not (f == "measure" and getattr(self, f) == "time"))
        return out


def _rebuild(cls: type, values: tuple) -> Window:
    obj = object.__new__(cls)
    for f, v in zip(cls._fields, values):
        object.__setattr__(obj, f, v)
    return obj


class TumblingWindow(Window):
    """Non-overlapping windows ``[offset_ms + k*size_ms, offset_ms + (k+1)*size_ms)``.

    Scotty's shape ``TumblingWindow(WindowMeasure.Time, size)`` (or ``WindowMeasure.Count``) is
    the same as ``TumblingWindow(size, measure=...)``.

    Parameters
    ----------
    size_ms : int
        Window length, > 0.
    offset_ms : int
        Shift of the window grid, ``0 <= offset_ms < size_ms``.
    measure : {"time", "count"}
        ``"count"`` (slicer only): windows of ``size_ms`` records.
    """

    __slots__ = ("size_ms", "offset_ms", "measure")
    type_name = "tumbling"
    _fields = ("size_ms", "offset_ms", "measure")
    size_ms: int
    offset_ms: int
    measure: str

    def __init__(self, *args: Any, measure: str = "time", **kwargs: Any) -> None:
        args, measure = _scotty_args("TumblingWindow", args, measure)
        self._init(*args, measure=measure, **kwargs)

    def _init(self, size_ms: int, offset_ms: int = 0, *, measure: str = "time") -> None:
        size = _integer("TumblingWindow", "size_ms", size_ms, 1)
        self._set(size_ms=size, offset_ms=_integer("TumblingWindow", "offset_ms", offset_ms, 0, size),
                  measure=_measure("TumblingWindow", measure))


class SlidingWindow(Window):
    """Windows ``[offset_ms + k*slide_ms, offset_ms + k*slide_ms + size_ms)`` for every integer ``k``.

    A record belongs to ``ceil(size_ms / slide_ms)`` windows (none when ``slide_ms > size_ms``
    and it falls in a gap). ``period_ms`` is Beam's name for ``slide_ms``; Scotty's shape
    ``SlidingWindow(WindowMeasure.Time, size, slide)`` works too.

    Parameters
    ----------
    size_ms : int
        Window length, > 0.
    slide_ms : int
        Distance between window starts, > 0 (or ``period_ms=``).
    offset_ms : int
        Shift of the window grid, ``0 <= offset_ms < slide_ms``.
    measure : {"time", "count"}
        ``"count"`` (slicer only): windows of ``size_ms`` records every ``slide_ms`` records.
    """

    __slots__ = ("size_ms", "slide_ms", "offset_ms", "measure")
    type_name = "sliding"
    _fields = ("size_ms", "slide_ms", "offset_ms", "measure")
    size_ms: int
    slide_ms: int
    offset_ms: int
    measure: str

    def __init__(self, *args: Any, measure: str = "time", **kwargs: Any) -> None:
        args, measure = _scotty_args("SlidingWindow", args, measure)
        self._init(*args, measure=measure, **kwargs)

    def _init(self, size_ms: int, slide_ms: int | None = None, offset_ms: int = 0, *,
              measure: str = "time", period_ms: int | None = None) -> None:
        if (slide_ms is None) == (period_ms is None):
            raise InvalidArgumentError(f"SlidingWindow: give slide_ms or period_ms (Beam's name), got slide_ms={slide_ms!r}, "
                             f"period_ms={period_ms!r}")
        name, value = ("slide_ms", slide_ms) if period_ms is None else ("period_ms", period_ms)
        slide = _integer("SlidingWindow", name, value, 1)
        self._set(size_ms=_integer("SlidingWindow", "size_ms", size_ms, 1), slide_ms=slide,
                  offset_ms=_integer("SlidingWindow", "offset_ms", offset_ms, 0, slide),
                  measure=_measure("SlidingWindow", measure))

    @property
    def period_ms(self) -> int:
        """Beam's name for :attr:`slide_ms`."""
        return self.slide_ms


class SessionWindow(Window):
    """Sessions ``[first, last + gap_ms)`` of records in event-time order. Where exactly
    ``gap_ms`` apart splits depends on the engine's anchor (``docs/semantics.md``): the Dataflow
    driver (Beam) splits there, the slicer (Scotty) joins records at most ``gap_ms`` apart.
    Scotty's shape ``SessionWindow(WindowMeasure.Time, gap)`` works too (time only)."""

    __slots__ = ("gap_ms",)
    type_name = "session"
    _fields = ("gap_ms",)
    gap_ms: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        args, measure = _scotty_args("SessionWindow", args, "time")
        if measure != "time":
            raise InvalidArgumentError(f"SessionWindow: measure={measure!r}: sessions are time windows only")
        self._init(*args, **kwargs)

    def _init(self, gap_ms: int) -> None:
        self._set(gap_ms=_integer("SessionWindow", "gap_ms", gap_ms, 1))


class GlobalWindow(Window):
    """One window over all of event time, ``[BEGINNING_OF_TIME_MS, END_OF_TIME_MS)``: it ends
    when the watermark reaches :data:`END_OF_TIME_MS` (the input is complete)."""

    __slots__ = ()
    type_name = "global"


#: Beam's names: the same classes.
FixedWindows = TumblingWindow
SlidingWindows = SlidingWindow
Sessions = SessionWindow
GlobalWindows = GlobalWindow

_TYPES: dict[str, type[Window]] = {
    "tumbling": TumblingWindow, "fixed": TumblingWindow, "sliding": SlidingWindow,
    "session": SessionWindow, "sessions": SessionWindow, "global": GlobalWindow,
}
_REQUIRED = {TumblingWindow: ("size_ms",), SlidingWindow: ("size_ms",), SessionWindow: ("gap_ms",), GlobalWindow: ()}


def json_object(obj: Any, name: str, needs: str) -> dict:
    """``obj`` (a dict, or JSON text or bytes of an object) as a dict; else a ValueError."""
    if isinstance(obj, (bytes, bytearray)):
        obj = obj.decode("utf-8", "replace")
    if isinstance(obj, str):
        try:
            obj = json.loads(obj)
        except ValueError as err:
            raise InvalidArgumentError(f"{name} {obj!r}: not JSON ({err})") from None
    if not isinstance(obj, dict):
        raise InvalidArgumentError(f"{name}={obj!r}: expected a JSON object with {needs}")
    return obj


def window_from_json(obj: dict | str) -> Window:
    """The window of a JSON form (a dict, or its text), as :meth:`Window.to_json` writes it.

    ``type``: ``tumbling`` (or ``fixed``), ``sliding``, ``session`` (or ``sessions``), ``global``;
    sliding windows take ``slide_ms`` or ``period_ms``. A bad form raises ``ValueError`` naming
    the field and the value.
    """
    obj = json_object(obj, "window", "a 'type'")
    kind = obj.get("type")
    cls = _TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise InvalidArgumentError(f"window.type={kind!r}: expected one of tumbling (fixed), sliding, session (sessions), global")
    allowed = set(cls._fields) | ({"period_ms"} if cls is SlidingWindow else set())
    fields = {k: v for k, v in obj.items() if k != "type"}
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise InvalidArgumentError(f"window.{unknown[0]}={fields[unknown[0]]!r}: not a field of a {cls.type_name} window "
                         f"(fields: {', '.join(sorted(allowed)) or 'none'})")
    for name in _REQUIRED[cls]:
        if name not in fields:
            raise InvalidArgumentError(f"window.{name}: missing (a {cls.type_name} window needs {', '.join(_REQUIRED[cls])})")
    if cls is SlidingWindow and "slide_ms" not in fields and "period_ms" not in fields:
        raise InvalidArgumentError("window.slide_ms: missing (a sliding window needs size_ms and slide_ms)")
    return cls(**fields)
