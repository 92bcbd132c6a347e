"""Window queries added and removed at runtime: control-topic commands and query ids.

A command travels as a modification punctuation (a JSON object on the source's control topic),
so every key group sees it at the same point of the stream and applies it there; a replay sees
it at the same point again. Two commands are window commands::

    {"op": "add_window", "id": "minute", "window": {"type": "sliding", "size_ms": 60000, "slide_ms": 10000}}
    {"op": "remove_window", "id": "minute"}

:func:`parse_command` turns one into an :class:`AddWindow` or a :class:`RemoveWindow` (the
window in the form of :func:`windowing.window_from_json`); a command with another ``op`` (e.g.
``rebalance``, for key-group migration) is not a window command and gives ``None``; a malformed
window command raises ``ValueError`` naming the field and the value. Engines take the typed
command with ``apply(command)``: ``SlicingWindowOperator``, ``KeyedSlicingOperator`` and
``watermarks.MultiQueryDriver``.

Query ids are strings: windows given to an engine as a list get ``"0"``, ``"1"``, ... (their
index), a dict ``{id: window}`` names them, and ``add_window(window)`` without an id takes the
next unused number.

Example
-------
>>> parse_command('{"op": "add_window", "id": "m", "window": {"type": "tumbling", "size_ms": 60000}}')
AddWindow(query_id='m', window=TumblingWindow(size_ms=60000, offset_ms=0))
>>> parse_command({"op": "remove_window", "id": "m"}), parse_command({"op": "rebalance"})
(RemoveWindow(query_id='m'), None)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from dataflow_kafka.windowing.windows import Window, json_object, window_from_json
from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["AddWindow", "RemoveWindow", "WindowCommand", "parse_command", "WindowQueries", "initial_queries",
           "next_query_id"]


@dataclass(frozen=True)
class AddWindow:
    """Add the window query ``query_id``."""

    query_id: str
    window: Window

    def to_json(self) -> dict:
        return {"op": "add_window", "id": self.query_id, "window": self.window.to_json()}


@dataclass(frozen=True)
class RemoveWindow:
    """Remove the window query ``query_id``."""

    query_id: str

    def to_json(self) -> dict:
        return {"op": "remove_window", "id": self.query_id}


WindowCommand = AddWindow | RemoveWindow
_FIELDS = {"add_window": {"op", "id", "window"}, "remove_window": {"op", "id"}}
WINDOW_OPS = frozenset(_FIELDS)   # the ops of the window commands, taken by the windowing stages


def parse_command(command: Mapping | str | bytes) -> WindowCommand | None:
    """The window command in ``command`` (a dict, or its JSON text); ``None`` for other ops."""
    obj = json_object(dict(command) if isinstance(command, Mapping) else command, "command", "an 'op'")
    op = obj.get("op")
    if op not in _FIELDS:
        return None
    extra = sorted(set(obj) - _FIELDS[op])
    if extra:
        raise InvalidArgumentError(f"{op}.{extra[0]}={obj[extra[0]]!r}: not a field of {op} (fields: "
                         f"{', '.join(sorted(_FIELDS[op]))})")
    qid = obj.get("id")
    if not isinstance(qid, str) or not qid:
        raise InvalidArgumentError(f"{op}.id={qid!r}: expected a non-empty string")
    if op == "remove_window":
        return RemoveWindow(qid)
    if "window" not in obj:
        raise InvalidArgumentError("add_window.window: missing (a window object such as "
                         '{"type": "tumbling", "size_ms": 60000})')
    try:
        window = window_from_json(obj["window"])
    except ValueError as err:
        raise InvalidArgumentError(f"add_window {qid!r}: {err}") from None
    return AddWindow(qid, window)


class WindowQueries:
    """Mixin of the engines that run window queries by id: :meth:`apply` a parsed command.

    The engine provides ``query_ids``, ``add_window(window, query_id)``, ``remove_window(query_id)``
    and an ``ignored_commands`` counter.
    """

    query_ids: list[str]
    ignored_commands: int

    def apply(self, command: WindowCommand) -> bool:
        """Apply a parsed control command (:func:`parse_command`). A command naming an unknown
        query to remove, or an id to add that exists, does nothing and is counted in
        ``ignored_commands``: a stream cannot fail on it, and every key group counts it the
        same. Returns whether the command changed the queries."""
        if not isinstance(command, (AddWindow, RemoveWindow)):
            raise ArgumentTypeError(f"apply({command!r}): expected an AddWindow or RemoveWindow")
        known = command.query_id in self.query_ids
        if isinstance(command, AddWindow) and not known:
            self.add_window(command.window, command.query_id)  # type: ignore[attr-defined]
            return True
        if isinstance(command, RemoveWindow) and known:
            self.remove_window(command.query_id)  # type: ignore[attr-defined]
            return True
        self.ignored_commands += 1
        return False


def initial_queries(windows: Mapping[str, Any] | Iterable[Any] | None) -> list[tuple[str, Any]]:
    """``(id, window)`` pairs of the windows an engine is built with: a list gets ids ``"0"``,
    ``"1"``, ... (the index), a dict names them (ids must be non-empty strings)."""
    if windows is None:
        return []
    if isinstance(windows, Mapping):
        pairs = list(windows.items())
        for qid, _ in pairs:
            check_query_id(qid)
        return pairs
    if isinstance(windows, (Window, str, bytes)) or not isinstance(windows, Iterable):
        raise ArgumentTypeError(f"windows={windows!r}: expected a list of windows or a dict {{id: window}}")
    return [(str(i), w) for i, w in enumerate(windows)]


def check_query_id(query_id: object) -> str:
    if not isinstance(query_id, str) or not query_id:
        raise InvalidArgumentError(f"query_id={query_id!r}: expected a non-empty string")
    return query_id


def next_query_id(taken: Iterable[str], requested: str | None, counter: int) -> tuple[str, int]:
    """The id of a new query and the next counter: ``requested`` (must be new), else the
    smallest number ``>= counter`` not taken, as a string."""
    taken = set(taken)
    if requested is not None:
        check_query_id(requested)
        if requested in taken:
            raise InvalidArgumentError(f"query_id={requested!r}: a query with this id exists (ids: {sorted(taken)})")
        return requested, counter
    while str(counter) in taken:
        counter += 1
    return str(counter), counter + 1
