"""Window definitions both engines accept: tumbling, sliding, session, global.

A window definition is a small immutable value (validated when built, equal when its fields are
equal, readable ``repr``, JSON round trip). It says *where* in event time records are grouped;
each engine compiles it into its own runtime: the slicer into slice edges and contexts (Scotty,
Traub et al., TODS 2021, §4.4 Window Type, §5.4.2), the Dataflow driver into a ``WindowFn`` with
AssignWindows / MergeWindows (the Dataflow Model, Akidau et al., VLDB 2015, §2.2 Windowing).

Conventions: a window ``[start, end)`` holds the records with ``start <= t < end``; times are
integer milliseconds (``*_ms``). ``measure="count"`` (slicer only) makes a tumbling or sliding
window count records instead: ``size_ms``, ``slide_ms`` and ``offset_ms`` are then record
positions in event-time order.

One name per concept (docs/ARCHITECTURE.md, "Vocabulary"): Beam's names (``FixedWindows``,
``SlidingWindows``, ``Sessions``, ``GlobalWindows``) live in :mod:`dataflow_kafka.compat.beam`, Scotty's
measure-first constructors and ``WindowMeasure`` in :mod:`dataflow_kafka.compat.scotty`; the old
import paths here still work, with a ``DeprecationWarning``. What the bounds of a window count is a
:class:`Measure`, the one measure enum of both engines.

A window class describes itself to the engines: its ``type_name`` (and ``json_aliases``) register
it for :func:`window_from_json` when the class is defined; its ``shape`` (:class:`WindowShape`)
says which runtime each engine compiles it to (each engine keeps one table keyed by shape:
``slicer/compile.py``, ``watermarks/windows.py``); ``context_free``, ``measure`` and
:attr:`Window.grid` are what the engines ask instead of the concrete type. A new window of an
existing shape touches its own class only.

Example
-------
>>> w = SlidingWindow(60_000, 10_000)
>>> w
SlidingWindow(size_ms=60000, slide_ms=10000, offset_ms=0)
>>> w.to_json()
{'type': 'sliding', 'size_ms': 60000, 'slide_ms': 10000, 'offset_ms': 0}
>>> window_from_json({"type": "sliding", "size_ms": 60000, "slide_ms": 10000}) == w
True
>>> SlidingWindow(10, period_ms=5), TumblingWindow(3, measure=Measure.COUNT)
(SlidingWindow(size_ms=10, slide_ms=5, offset_ms=0), TumblingWindow(size_ms=3, offset_ms=0, measure='count'))
"""

from __future__ import annotations

import enum
import json
import warnings
from typing import Any, ClassVar

from dataflow_kafka.deprecation import Moved, moved_names
from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError

__all__ = [
    "BEGINNING_OF_TIME_MS", "END_OF_TIME_MS", "MEASURES", "Measure", "WindowShape",
    "Window", "window_types", "window_type_names", "TumblingWindow", "SlidingWindow", "SessionWindow",
    "GlobalWindow", "window_from_json",
]

#: Earliest representable event time (about -285 000 years; exact in int64 and float64).
BEGINNING_OF_TIME_MS = -(2**53)
#: End of event time: a watermark at this value means "the input is complete".
END_OF_TIME_MS = 2**53


class Measure(str, enum.Enum):
    """What the bounds of a window count: ``TIME`` (event time, ms) or ``COUNT`` (records, in
    event-time order). Equal to the strings ``"time"`` and ``"count"`` that ``measure=`` takes;
    the one measure enum of both engines (Scotty's ``WindowMeasure.Time`` names it in
    :mod:`dataflow_kafka.compat.scotty`)."""

    TIME = "time"
    COUNT = "count"

    __str__ = str.__str__

    @classmethod
    def parse(cls, value: object) -> "Measure":
        """The measure of ``value``: a :class:`Measure`, or its name in any case (``"Time"``)."""
        name = measure_name(value)
        if name is None:
            raise InvalidArgumentError(f"measure={value!r}: expected 'time' or 'count'")
        return cls(name)


#: What the bounds of a tumbling or sliding window count (the values of :class:`Measure`).
MEASURES = tuple(m.value for m in Measure)


class WindowShape(str, enum.Enum):
    """The runtime family a window compiles to in every engine (the key of each engine's table),
    and what the engines read of a window of that shape: ``TUMBLING`` and ``SLIDING``:
    :attr:`Window.grid` and ``measure``; ``SESSION``: ``gap_ms``; ``GLOBAL``: nothing."""

    TUMBLING = "tumbling"
    SLIDING = "sliding"
    SESSION = "session"
    GLOBAL = "global"

    def __repr__(self) -> str:
        return f"WindowShape.{self.name}"


def measure_name(value: object) -> str | None:
    """``"time"`` or ``"count"`` for a measure given as a value: a :class:`Measure`, any enum
    whose value is one of :data:`MEASURES`, or the name in any case (Scotty's ``"Time"``);
    ``None`` for anything else (a size, say)."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, str) and value.lower() in MEASURES:
        return value.lower()
    return None


def scotty_args(cls: str, args: tuple, measure: object) -> tuple[tuple, str]:
    """Scotty's constructor shape ``(measure, size, ...)`` (deprecated here: it lives in
    :mod:`dataflow_kafka.compat.scotty`): the measure taken from the first argument with a
    ``DeprecationWarning``; ours ``(size, ..., measure=)`` passed through."""
    first = measure_name(args[0]) if args else None
    if first is None:
        return args, measure
    if measure_name(measure) != "time":
        raise InvalidArgumentError(f"{cls}: measure given twice ({args[0]!r} and measure={measure!r})")
    ours = f"{cls}(...)" if first == "time" else f"{cls}(..., measure={first!r})"
    warnings.warn(f"{cls}({first!r}, ...): the measure first is Scotty's constructor shape, deprecated here; "
                  f"write {ours} or use dataflow_kafka.compat.scotty.{cls}", DeprecationWarning, stacklevel=3)
    return args[1:], first


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
    """``value`` (a :class:`Measure` or its lower-case name) as the plain string a window keeps."""
    if value not in MEASURES:
        raise InvalidArgumentError(f"{cls}: measure={value!r}: expected 'time' or 'count'")
    return Measure(value).value


_REGISTRY: dict[str, type["Window"]] = {}


class Window:
    """Base of the shared window definitions: immutable values with a JSON form.

    A subclass declares, in its own body:

    * ``type_name`` (and ``json_aliases``): the ``type`` of its JSON form; defining the class
      registers it for :func:`window_from_json`;
    * ``_fields`` (the constructor's fields, the JSON form's keys) and ``json_required`` (fields
      the JSON form must give; a tuple inside means "one of these");
    * ``shape`` (:class:`WindowShape`): the runtime each engine compiles it to;
    * ``context_free``: every window edge is known without looking at the records (Scotty §4.4);
      ``measure`` (``"time"`` unless a field says otherwise); :attr:`grid` for periodic shapes.
    """

    __slots__ = ()
    #: The ``type`` of the JSON form.
    type_name: ClassVar[str] = ""
    #: Other accepted ``type`` names (Beam's).
    json_aliases: ClassVar[tuple[str, ...]] = ()
    #: JSON keys accepted besides ``_fields`` (e.g. Beam's ``period_ms``).
    json_extra_fields: ClassVar[tuple[str, ...]] = ()
    #: JSON keys that must be present; a tuple entry: one of them.
    json_required: ClassVar[tuple] = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    #: The runtime family (:class:`WindowShape`) each engine compiles the window to.
    shape: ClassVar[WindowShape]
    #: Every edge is known a priori (tumbling, sliding, global); sessions need the records.
    context_free: ClassVar[bool] = True
    #: What the bounds count (a field on windows that take ``measure=``).
    measure: str = "time"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "type_name" in cls.__dict__ and cls.type_name:
            for name in (cls.type_name, *cls.json_aliases):
                old = _REGISTRY.get(name)
                if old is not None and old.__qualname__ != cls.__qualname__:
                    raise ArgumentTypeError(f"window type name {name!r}: taken by {old.__qualname__}")
                _REGISTRY[name] = cls

    @property
    def grid(self) -> tuple[int, int, int] | None:
        """``(size, slide, offset)`` of a periodic window (tumbling, sliding), else ``None``."""
        return None

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

    Parameters
    ----------
    size_ms : int
        Window length, > 0.
    offset_ms : int
        Shift of the window grid, ``0 <= offset_ms < size_ms``.
    measure : Measure or {"time", "count"}
        ``COUNT`` (slicer only): windows of ``size_ms`` records.
    """

    __slots__ = ("size_ms", "offset_ms", "measure")
    type_name = "tumbling"
    json_aliases = ("fixed",)
    json_required = ("size_ms",)
    _fields = ("size_ms", "offset_ms", "measure")
    shape = WindowShape.TUMBLING
    size_ms: int
    offset_ms: int
    measure: str

    def __init__(self, *args: Any, measure: Measure | str = "time", **kwargs: Any) -> None:
        args, measure = scotty_args("TumblingWindow", args, measure)
        self._init(*args, measure=measure, **kwargs)

    def _init(self, size_ms: int, offset_ms: int = 0, *, measure: str = "time") -> None:
        size = _integer("TumblingWindow", "size_ms", size_ms, 1)
        self._set(size_ms=size, offset_ms=_integer("TumblingWindow", "offset_ms", offset_ms, 0, size),
                  measure=_measure("TumblingWindow", measure))

    @property
    def slide_ms(self) -> int:
        """A tumbling window slides by its size."""
        return self.size_ms

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.size_ms, self.size_ms, self.offset_ms)


class SlidingWindow(Window):
    """Windows ``[offset_ms + k*slide_ms, offset_ms + k*slide_ms + size_ms)`` for every integer ``k``.

    A record belongs to ``ceil(size_ms / slide_ms)`` windows (none when ``slide_ms > size_ms``
    and it falls in a gap). ``period_ms`` is Beam's name for ``slide_ms``, accepted as a keyword
    and in the JSON form.

    Parameters
    ----------
    size_ms : int
        Window length, > 0.
    slide_ms : int
        Distance between window starts, > 0 (or ``period_ms=``).
    offset_ms : int
        Shift of the window grid, ``0 <= offset_ms < slide_ms``.
    measure : Measure or {"time", "count"}
        ``COUNT`` (slicer only): windows of ``size_ms`` records every ``slide_ms`` records.
    """

    __slots__ = ("size_ms", "slide_ms", "offset_ms", "measure")
    type_name = "sliding"
    json_required = ("size_ms", ("slide_ms", "period_ms"))
    json_extra_fields = ("period_ms",)
    _fields = ("size_ms", "slide_ms", "offset_ms", "measure")
    shape = WindowShape.SLIDING
    size_ms: int
    slide_ms: int
    offset_ms: int
    measure: str

    def __init__(self, *args: Any, measure: Measure | str = "time", **kwargs: Any) -> None:
        args, measure = scotty_args("SlidingWindow", args, measure)
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

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.size_ms, self.slide_ms, self.offset_ms)


class SessionWindow(Window):
    """Sessions ``[first, last + gap_ms)`` of records in event-time order. Where exactly
    ``gap_ms`` apart splits depends on the engine's anchor (``docs/semantics.md``): the Dataflow
    driver (Beam) splits there, the slicer (Scotty) joins records at most ``gap_ms`` apart.
    Time only."""

    __slots__ = ("gap_ms",)
    type_name = "session"
    json_aliases = ("sessions",)
    json_required = ("gap_ms",)
    _fields = ("gap_ms",)
    shape = WindowShape.SESSION
    context_free = False
    gap_ms: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        args, measure = scotty_args("SessionWindow", args, "time")
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
    shape = WindowShape.GLOBAL


#: Other systems' names for the windows and the measure: their one home is dataflow_kafka.compat.
MOVED = {
    **{old: Moved("dataflow_kafka.compat.beam", old, f"it is Beam's name for {new}")
       for old, new in (("FixedWindows", "TumblingWindow"), ("SlidingWindows", "SlidingWindow"),
                        ("Sessions", "SessionWindow"), ("GlobalWindows", "GlobalWindow"))},
    "WindowMeasure": Moved("dataflow_kafka.compat.scotty", "WindowMeasure", "it is Scotty's name for Measure"),
}
__getattr__ = moved_names(__name__, MOVED)


def window_types() -> dict[str, type[Window]]:
    """Every registered JSON ``type`` name (aliases included) and its window class."""
    return dict(_REGISTRY)


def window_type_names() -> str:
    """The registered window classes for messages: ``"TumblingWindow, SlidingWindow, ..."``."""
    return ", ".join(dict.fromkeys(cls.__name__ for cls in _REGISTRY.values()))


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

    ``type``: a registered name (:func:`window_types`): ``tumbling`` (or ``fixed``), ``sliding``,
    ``session`` (or ``sessions``), ``global``; sliding windows take ``slide_ms`` or ``period_ms``.
    A bad form raises ``ValueError`` naming the field and the value.
    """
    obj = json_object(obj, "window", "a 'type'")
    kind = obj.get("type")
    cls = _REGISTRY.get(kind) if isinstance(kind, str) else None
    if cls is None:
        names = {}
        for name, c in _REGISTRY.items():
            names.setdefault(c, []).append(name)
        known = ", ".join(n[0] + (f" ({', '.join(n[1:])})" if n[1:] else "") for n in names.values())
        raise InvalidArgumentError(f"window.type={kind!r}: expected one of {known}")
    allowed = set(cls._fields) | set(cls.json_extra_fields)
    fields = {k: v for k, v in obj.items() if k != "type"}
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise InvalidArgumentError(f"window.{unknown[0]}={fields[unknown[0]]!r}: not a field of a {cls.type_name} window "
                         f"(fields: {', '.join(sorted(allowed)) or 'none'})")
    needed = [need if isinstance(need, str) else need[0] for need in cls.json_required]
    for need in cls.json_required:
        options = (need,) if isinstance(need, str) else need
        if not any(name in fields for name in options):
            raise InvalidArgumentError(f"window.{options[0]}: missing (a {cls.type_name} window needs "
                                       f"{_and(needed)})")
    return cls(**fields)


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
