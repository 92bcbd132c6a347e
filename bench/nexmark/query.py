"""What a NEXMark query is in this suite: this project's forms, Spark's native form, a reference.

A :class:`Query` names the **variants** that express it with this project's API (``"slicer"``:
the first windowing stage is a :class:`~slicer.stage.SlicerStage`; ``"dataflow"``: a
:class:`~watermarks.stage.WindowingStage`; ``"sql"``: a projection of the source's rows, which
needs no stage) and gives, per variant:

* :meth:`Query.spark`: the streaming DataFrame over ``format("dataflow-kafka")`` rows;
* :meth:`Query.local`: the same query on pandas micro-batches without Spark
  (:meth:`keygroups.Pipeline.run_local` for the windowed ones);
* :meth:`Query.results`: the output frames (one per micro-batch, either path) folded into the
  query's final result rows (:func:`windowing.final.current_windows` for windows);

and, once for the query, :meth:`Query.reference` (the brute-force answer on the bids, in any
order) and :meth:`Query.native` (the query in Spark's own API: ``withWatermark``,
``groupBy(window)``, append mode) with :meth:`Query.native_results`. Result rows are plain tuples
(:attr:`Query.columns`), compared as multisets.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Sequence

import pandas as pd

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.windowing.final import current_windows

__all__ = ["Query", "Projection", "Settings", "BID_DDL", "parse_bids", "bids_frame",
           "window_rows", "ms", "epoch_ms"]

#: The bid record's schema as Spark DDL (``from_json``), ``dateTime`` in epoch ms.
BID_DDL = "auction BIGINT, bidder BIGINT, price BIGINT, dateTime BIGINT, extra STRING"
_BID_FIELDS = ("auction", "bidder", "price", "dateTime", "extra")


@dataclass(frozen=True)
class Settings:
    """How our variants run: every windowing stage's allowed lateness and key groups.

    ``top_key_groups``: the key groups of the slicer forms whose result is a top per window (Q5,
    Q7). With one, the slicer's keyed table and the top per window run in one operator; with more,
    the table and each key group's top run in that many, and a second operator (one key group)
    takes the top of those. On two cores the second operator cost more than the first one's
    parallelism saved at every batch size measured (docs/nexmark.md, 2026-12-01 evening)."""

    lateness_ms: int = 5000
    key_groups: int = 4
    top_key_groups: int = 1


def ms(ts: Any) -> int:
    """Epoch ms of a pandas/Python timestamp or an integer."""
    if isinstance(ts, (int,)) and not isinstance(ts, bool):
        return ts
    return int(pd.Timestamp(ts).value // 1_000_000)


def epoch_ms(source):
    """Spark: the source's rows with the epoch-ms columns the stages read (``event_time_ms``,
    ``punctuation_ms``, ``processing_time_ms``) instead of its timestamp columns.

    Work-around (docs/nexmark.md, findings): a first stage with a ``Computed`` input runs a
    ``mapInPandas`` step over the source's rows, and pandas cannot hold ``endOfInput=punctuate``'s
    punctuation (9999-12-31 overflows nanoseconds), so the run's last batch fails; without the
    timestamp columns nothing overflows. ``Pipeline.apply`` keeps ``*_ms`` columns it is given."""
    from pyspark.sql import functions as F

    stamps = [c for c in ("event_time", "punctuation", "processing_time") if c in source.columns]
    return source.withColumns({f"{c}_ms": F.unix_millis(c) for c in stamps}).drop(*stamps)


def parse_bids(df, with_kind: bool | None = None):
    """Spark: the bids of Kafka rows as columns (``from_json``), ``dateTime`` as a timestamp and
    ``ts_ms``; ``with_kind``: rows of ``format("dataflow-kafka")`` with its markers (data rows
    kept; None: when ``df`` has a ``kind`` column)."""
    from pyspark.sql import functions as F

    if with_kind is None:
        with_kind = "kind" in df.columns
    if with_kind:
        df = df.where(F.col("kind") == "data")
    b = df.select(F.from_json(F.col("value").cast("string"), BID_DDL).alias("b")).select("b.*")
    return b.withColumn("ts_ms", F.col("dateTime")).withColumn("dateTime", F.timestamp_millis("dateTime"))


def bids_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """pandas: the bids of a micro-batch of source rows (data rows) as columns."""
    data = frame[frame["kind"] == "data"] if "kind" in frame.columns else frame
    recs = [json.loads(v) for v in data["value"]]
    return pd.DataFrame({f: [r[f] for r in recs] for f in _BID_FIELDS})


def window_rows(frames: Sequence[pd.DataFrame], stage: Any) -> pd.DataFrame:
    """The current result per window of ``stage``'s rows in ``frames`` (the last stage of a pipeline)."""
    frames = [f for f in frames if f is not None and len(f)]
    if not frames:
        return pd.DataFrame()
    return current_windows(frames, stage)


class Query(ABC):
    """One NEXMark query; see the module docstring. Subclasses set the class attributes."""

    name: str = ""
    title: str = ""
    columns: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    #: the result column holding the event time at which a result can be known (a window's end)
    ready_column: str = ""
    #: what this query's variants cannot say that the reference says, if anything (docs)
    notes: str = ""

    def _check(self, variant: str) -> None:
        if variant not in self.variants:
            raise ValueError(f"{self.name}: variant {variant!r} is not one of {self.variants}")

    # -- the answer -------------------------------------------------------------------------------
    @abstractmethod
    def reference(self, bids: Sequence[dict], variant: str | None = None) -> list[tuple]:
        """The result rows, brute force, from the bid records (any order); ``variant``: where the
        engines' documented rules differ (sessions at exactly the gap), that engine's rule."""

    # -- this project -----------------------------------------------------------------------------
    def pipeline(self, variant: str, settings: Settings = Settings()) -> Pipeline:
        """The stages of a windowed query."""
        raise NotImplementedError(f"{self.name} has no stages")

    def spark(self, variant: str, source, settings: Settings = Settings()):
        """The output DataFrame over ``format("dataflow-kafka")`` rows, or over its reader before
        ``load()`` (the source then routes and packs the first operator's rows itself:
        ``keygroups.Pipeline.apply``)."""
        self._check(variant)
        loaded = hasattr(source, "columns")
        return self.pipeline(variant, settings).apply(epoch_ms(source) if loaded else source)

    def local(self, variant: str, batches: Sequence[pd.DataFrame], settings: Settings = Settings()
              ) -> list[pd.DataFrame]:
        """The output frames of :meth:`spark`'s query run without Spark on the same micro-batches."""
        self._check(variant)
        return self.pipeline(variant, settings).run_local(batches)

    @abstractmethod
    def results(self, variant: str, frames: Sequence[pd.DataFrame], settings: Settings = Settings()) -> list[tuple]:
        """Result rows of the output frames (one per micro-batch, from either path)."""

    def last_stage(self, variant: str, settings: Settings = Settings()):
        return self.pipeline(variant, settings).stages[-1]

    # -- Spark's own API --------------------------------------------------------------------------
    @abstractmethod
    def native(self, bids, delay: str):
        """The query in Spark's API on a streaming DataFrame of bids (:func:`parse_bids`), with
        ``withWatermark("dateTime", delay)``; output mode append."""

    def native_results(self, frame: pd.DataFrame) -> list[tuple]:
        """Result rows of :meth:`native`'s output (collected)."""
        return sorted(tuple(_plain(v) for v in row) for row in frame[list(self.columns)].itertuples(index=False))

    # -- latency ----------------------------------------------------------------------------------
    def overlaps(self, row: tuple, other: tuple) -> bool:
        """Whether result ``row`` covers part of ``other``'s extent (sessions of one bidder that
        intersect); a row overlapping a result not known yet is not settled (:mod:`~bench.nexmark.latency`)."""
        return False

    def sent_index(self, sent: Sequence[tuple[dict, int]]) -> dict:
        """What :meth:`ready_ms` needs of the bids sent, ``(record, send time ms)``."""
        return {}

    def ready_ms(self, row: tuple, index: dict) -> int | None:
        """When result ``row`` could first be known: a window's end (event time is the generator's
        clock; a projected bid: when it was sent)."""
        return row[self.columns.index(self.ready_column)]


class Projection(Query):
    """A stateless query (a projection or selection of bids): the same Spark expressions over the
    source's rows (ours) and over ``format("kafka")`` rows (Spark's); no stage, no windows."""

    variants = ("sql",)

    @abstractmethod
    def select(self, bids):
        """Spark: the query over a DataFrame of bids (:func:`parse_bids`)."""

    @abstractmethod
    def select_local(self, bids: pd.DataFrame) -> pd.DataFrame:
        """pandas: the same over a frame of bids (:func:`bids_frame`)."""

    def reference(self, bids, variant=None):
        frame = pd.DataFrame({f: [b[f] for b in bids] for f in _BID_FIELDS})
        return self.native_results(self.select_local(frame))

    def spark(self, variant, source, settings=Settings()):
        self._check(variant)
        return self.select(parse_bids(source))

    def local(self, variant, batches, settings=Settings()):
        self._check(variant)
        return [self.select_local(bids_frame(b)) for b in batches]

    def results(self, variant, frames, settings=Settings()):
        return sorted(r for f in frames if len(f) for r in self.native_results(f))

    def native(self, bids, delay):
        return self.select(bids)

    #: the columns that find a result row's bid (for its send time)
    identity: tuple[str, ...] = ("auction", "bidder", "dateTime")

    def sent_index(self, sent):
        return {tuple(r[c] for c in self.identity): t for r, t in sent}

    def ready_ms(self, row, index):
        named = dict(zip(self.columns, row))
        return index.get(tuple(named[c] for c in self.identity))


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, pd.Timestamp):
        return ms(v)
    return v
