"""The aggregations NEXMark needs beyond the built-ins: the entries with the highest value, and the
values seen most often.

Q5 (the auctions with the most bids in a window) and Q7 (the bids with the highest price in a
window) both keep, per window, every entry whose ``by`` field equals the window's maximum
(ties kept, as the public SQL forms of the queries keep them: a join on ``num >= maxn`` or on
``price = maxprice``). Written as a user writes an aggregation for this project: a Beam-style
:class:`windowing.Combiner`, which the Dataflow stage runs (the slicer reads values as numbers,
so it cannot take JSON entries).

Inputs are JSON object texts (``keygroups.json_object`` of a previous stage's columns), the
JSON list text this aggregation itself produced (a second level merging the first level's
results), pairs ``(value of by, entry)`` (a Dataflow stage's tuple value: the number read by
Spark beside the record's text), whose entry is parsed only when its value is the window's
highest so far (in NEXMark Q7 about one bid in fourteen), or, with ``fields``, tuples of those
fields' values (a Dataflow stage's tuple value of a previous stage's columns), made entries only
at the top: no JSON text per row. An entry is identified by its ``key`` fields (default: all of them); when one identity
comes again (an update of a window the previous stage emitted before), the higher value wins:
the updates of counts and maxima only grow, so that is the latest one.
"""

from __future__ import annotations

import json
import json.scanner
from collections import Counter
from operator import itemgetter
from typing import Any, Iterable, Sequence

from dataflow_kafka.errors import InvalidArgumentError
from dataflow_kafka.windowing import Combiner

__all__ = ["ArgMax", "MostFrequent"]


class ArgMax(Combiner):
    """Per window: the entries whose ``by`` field is the highest (all of them on a tie), as a JSON
    list sorted by identity. ``key``: the fields naming an entry (None: the whole entry);
    ``name``: the output column.

    >>> a = ArgMax("count", key=("auction",))
    >>> acc = a.create_accumulator()
    >>> for v in ('{"auction":1,"count":2}', '{"auction":2,"count":3}', '{"auction":1,"count":3}'):
    ...     acc = a.add_input(acc, v)
    >>> a.extract_output(acc)
    [{'auction': 1, 'count': 3}, {'auction': 2, 'count': 3}]
    """

    spark_type = "string"

    def __init__(self, by: str, key: Sequence[str] | None = None, name: str = "top",
                 fields: Sequence[str] | None = None) -> None:
        self.by, self.key, self._name = by, tuple(key) if key is not None else None, name
        self.fields = tuple(fields) if fields is not None else None
        if self.fields is not None and by not in self.fields:
            raise InvalidArgumentError(f"ArgMax: by={by!r} is not one of fields={self.fields!r}")

    @property
    def name(self) -> str:
        return self._name

    def _identity(self, entry: dict) -> str:
        fields = self.key if self.key is not None else sorted(entry)
        return _COMPACT([entry.get(f) for f in fields])

    # accumulator: [highest value or None, {identity: entry}] holding only entries at the highest value
    def create_accumulator(self) -> list:
        return [None, {}]

    def add_input(self, accumulator: list, value: Any) -> list:
        if isinstance(value, tuple) or self.fields is not None:
            return self.add_inputs(accumulator, [value])
        parsed = json.loads(value) if isinstance(value, (str, bytes)) else value
        for entry in parsed if isinstance(parsed, list) else [parsed]:
            v = entry.get(self.by)
            if v is None:
                continue
            if accumulator[0] is None or v > accumulator[0]:
                accumulator[0], accumulator[1] = v, {}
            if v == accumulator[0]:
                accumulator[1][self._identity(entry)] = entry
        return accumulator

    def add_inputs(self, accumulator: list, values: Sequence[Any]) -> list:
        """Every value in one pass (the Dataflow driver gives a window's values of a bundle at once):
        each text parsed by the C scanner without ``json.loads``'s wrappers (a pair's entry only
        if its value is the highest; tuples of ``fields``: the highest ``by`` of their column, an
        entry made only of the tuples at it), then the highest ``by`` found before any entry's
        identity is built; the same accumulator as ``add_input`` per value."""
        by = self.by
        if self.fields is not None and values and all(type(v) is tuple for v in values):
            i = self.fields.index(by)                 # tuples of the fields: the top found by their by
            try:
                high = max(map(itemgetter(i), values))
            except TypeError:                         # a None by: the pairs' general pass below
                pass
            else:                                     # (all None: nothing to add)
                return accumulator if high is None else self._add_top(
                    accumulator, [v for v in values if v[i] == high], high)
        if self.fields is not None:                   # a tuple of the fields: the pair (its by, itself)
            i = self.fields.index(by)
            values = [(v[i], v) if type(v) is tuple else v for v in values]
        if values and all(type(v) is tuple for v in values):
            try:                                      # pairs only: the top found among their numbers
                high = max(values)[0]                 # (a None number: TypeError, the general pass)
            except TypeError:
                pass
            else:                                     # (all None: max is a None pair; nothing to add)
                return accumulator if high is None else self._add_top(
                    accumulator, [e for v, e in values if v == high], high)
        entries = []
        for value in values:
            if isinstance(value, tuple):
                entries.append(value)
                continue
            parsed = _parse(value) if isinstance(value, (str, bytes)) else value
            for e in parsed if isinstance(parsed, list) else (parsed,):
                entries.append((e.get(by), e))
        entries = [e for e in entries if e[0] is not None]
        if not entries:
            return accumulator
        high = max(v for v, _ in entries)
        return self._add_top(accumulator, [e for v, e in entries if v == high], high)

    def _add_top(self, accumulator: list, top: list, high: Any) -> list:
        """``accumulator`` with the entries (texts or parsed) whose ``by`` is ``high``, the
        highest of a call's values."""
        by = self.by
        if accumulator[0] is not None and high < accumulator[0]:
            return accumulator
        top = [_parse(e) if isinstance(e, (str, bytes)) else dict(zip(self.fields, e)) if type(e) is tuple else e
               for e in top]
        top = [e for e in top if e.get(by) is not None]
        if not top:
            return accumulator
        high = top[0][by]                      # the entry's own value (a pair's number may be a float)
        if accumulator[0] is None or high > accumulator[0]:
            accumulator[0], accumulator[1] = high, {}
        kept = accumulator[1]
        for e in top:
            kept[self._identity(e)] = e
        return accumulator

    def selection(self, value_columns: int) -> tuple[str, int] | None:
        """``("max", i)``: a tuple value's column of ``by`` (one of ``fields``, or a pair's number);
        None for JSON texts, whose ``by`` only a parse finds."""
        if self.fields is not None:
            return ("max", self.fields.index(self.by)) if value_columns == len(self.fields) else None
        return ("max", 0) if value_columns == 2 else None

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        out = self.create_accumulator()
        for acc in accumulators:
            if acc is not None and acc[0] is not None:
                out = self.add_input(out, list(acc[1].values()))
        return out

    def extract_output(self, accumulator: list) -> list:
        if accumulator is None:
            return []
        return [accumulator[1][k] for k in sorted(accumulator[1])]

    def __repr__(self) -> str:
        return f"ArgMax(by={self.by!r}, key={self.key!r}, name={self._name!r}, fields={self.fields!r})"


class MostFrequent(Combiner):
    """Per window: the values seen most often (all of them on a tie), each as ``{field: value,
    "count": n}`` in a JSON list sorted by value: NEXMark Q5's hot items in one aggregation (Beam's
    ``Count.perElement`` then ``Top``, as one ``CombineFn``). Nulls are not counted.

    >>> a = MostFrequent("auction")
    >>> a.extract_output(a.add_inputs(a.create_accumulator(), [3, 1, 3, None, 1, 2]))
    [{'auction': 1, 'count': 2}, {'auction': 3, 'count': 2}]
    """

    spark_type = "string"

    def __init__(self, field: str, name: str = "top") -> None:
        self.field, self._name = field, name

    @property
    def name(self) -> str:
        return self._name

    # accumulator: {value: count}
    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, accumulator: dict, value: Any) -> dict:
        return self.add_inputs(accumulator, [value])

    def add_inputs(self, accumulator: dict, values: Sequence[Any]) -> dict:
        """A bundle's values counted at C speed (``Counter``), then added to the accumulator."""
        counts = Counter(values.tolist() if hasattr(values, "tolist") else values)
        for v, n in counts.items():
            if v is None or v != v:                 # None, NaN
                continue
            accumulator[v] = accumulator.get(v, 0) + n
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[dict]) -> dict:
        out: dict = {}
        for acc in accumulators:
            for v, n in (acc or {}).items():
                out[v] = out.get(v, 0) + n
        return out

    def extract_output(self, accumulator: dict) -> list:
        if not accumulator:
            return []
        top = max(accumulator.values())
        return [{self.field: v, "count": n} for v, n in sorted(accumulator.items()) if n == top]

    def __repr__(self) -> str:
        return f"MostFrequent(field={self.field!r}, name={self._name!r})"


_SCAN = json.scanner.make_scanner(json.JSONDecoder())
#: ``json.dumps(v, separators=(",", ":"))`` with one encoder (``json.dumps`` builds one per call
#: for any non-default argument)
_COMPACT = json.JSONEncoder(separators=(",", ":")).encode


def _parse(text: str | bytes) -> Any:
    """``json.loads(text)``, faster for a compact text starting with ``{`` or ``[``: one call of
    the decoder's scanner; any other text (whitespace around it, another encoding, not JSON) goes
    to ``json.loads``, which parses it or raises as it would."""
    if isinstance(text, bytes):
        if text[:1] not in (b"{", b"["):
            return json.loads(text)
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            return json.loads(text)
    if text[:1] in ("{", "["):
        try:
            obj, end = _SCAN(text, 0)
        except StopIteration:
            pass
        else:
            if end == len(text):
                return obj
    return json.loads(text)
