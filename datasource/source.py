"""The ``dataflow-kafka`` source: Kafka records plus timestamp and modification punctuations.

Streaming (``spark.readStream.format("dataflow-kafka")``) and batch (``spark.read``) readers
share one range reader (:mod:`datasource.kafka_read`), so a batch read of an offset range returns
the same data rows as the streaming reads of that range.

Punctuations (Enorm, section 6.2; data-trace types, section 4)
-------------------------------------------------------------
* **Timestamp punctuation**: for every Kafka partition and micro-batch one row of kind
  ``punctuation`` after the partition's data: "no more records of this partition with event time
  below ``punctuation``", where ``punctuation`` = newest event time this query has read from the
  partition (up to the batch's end offset) minus ``watermarkDelayMs``. The task reading the range
  computes it as ``max(p, newest event time in the range)``, where ``p``, the newest event time
  before the range, is part of the offset Spark logs. So the value depends only on logged offsets
  and the records in them: it is monotone per partition and a replayed batch emits the same one.
  The driver learns the range's newest event time, for the next batch's ``p``, from the entry
  the task leaves in ``rangeStatsTopic`` (:mod:`datasource.range_stats`; none in
  Trigger.AvailableNow's last batch); without one it scans the range itself, in a background
  thread while the tasks read it, or synchronously. With ``minPartitions`` a partition's range is split over
  several tasks; each emits a punctuation from its piece and the partition's value for the
  batch is their maximum (what ``watermarks.PunctuationTracker`` computes). With
  ``maxPartitions`` several ranges share a task (:class:`RangeGroup`); each still emits its own
  rows and punctuation.
  Records that violate it (older than the watermark delay allows) are still delivered as data:
  operators decide lateness.
  Producers may write their own punctuation records (header ``dataflow.punctuation``); they are
  passed through in offset order as ``punctuation`` rows.
* **Modification punctuation**: commands from ``controlTopic`` are assigned to a micro-batch by
  the driver and written into that batch's end offset; every Kafka partition's task emits each
  command once, before its data, so all parallel instances see it at the same point of the
  stream, and a replay sees it there again.
* The batch's processing time is in the offset too (``processing_time`` column).
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from dataflow_kafka.collector import freeze_worker_heap
from dataflow_kafka.datasource import kafka_read, kafka_security, range_stats
from dataflow_kafka.datasource.offsets import (
    TP, describe_topics, from_json_partitions, rate_limit, resolve_partitions, starting_offsets, to_json_partitions,
)
from dataflow_kafka.datasource.options import OptionError, SourceOptions, parse_source_options, parse_sink_options
from dataflow_kafka.datasource.schema import KIND_DATA, KIND_ERROR, KIND_MODIFICATION, KIND_PUNCTUATION, source_schema

__all__ = ["DataflowKafkaDataSource", "OffsetRange", "RangeGroup"]


@dataclass
class OffsetRange(InputPartition):
    """One Spark task: offsets ``[start, end)`` of one topic-partition (picklable)."""

    topic: str
    partition: int
    start: int
    end: int
    newest_before_ms: int | None    # newest data event time before ``start`` (offset ``p``), or None
    processing_time_ms: int
    mods: list = field(default_factory=list)   # modification records to emit first
    publish_stats: bool = False                # streaming: leave the range's newest event time for the driver
    notes: list = field(default_factory=list)  # error rows to emit (e.g. malformed control records)
    end_of_input: bool = False                 # endOfInput=punctuate, the run's last range: punctuate to the end
    #: newest data event time before the micro-batch over every partition the source reads (the
    #: largest ``newest_before_ms``, None: none yet): no source punctuation of an earlier batch
    #: exceeds it (``keyGroupPacking``'s step before the shuffle, ``watermarks.before_shuffle``)
    newest_of_source_ms: int | None = None

    def __post_init__(self) -> None:
        InputPartition.__init__(self, None)


@dataclass
class RangeGroup(InputPartition):
    """One Spark task reading several offset ranges one after another (``maxPartitions``); every
    range emits its own rows, punctuation included, as in its own task."""

    ranges: list[OffsetRange]

    def __post_init__(self) -> None:
        InputPartition.__init__(self, None)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _read(opts: SourceOptions, part: OffsetRange | RangeGroup) -> Iterator[pa.RecordBatch]:
    """Rows of one task: of its range, or of each range of a :class:`RangeGroup` in turn, read
    with the Python worker's pooled consumer (:func:`kafka_read.pooled_consumer`: one per Kafka
    configuration, prefetch class and process, assigned each range in turn, reused by later tasks
    and batches).
    The worker's heap is frozen on its first read (:func:`dataflow_kafka.collector.freeze_worker_heap`).
    With ``keyGroupPacking`` the rows go through its ``pack`` (``(key_group, payload)`` rows)."""
    freeze_worker_heap()
    ranges = part.ranges if isinstance(part, RangeGroup) else [part]
    rows = (b for r in ranges for b in _read_range(opts, r))
    if opts.key_group_packing is not None:      # keyGroupPacking: the first operator's routing and packing here
        rows = opts.key_group_packing.pack(rows, ranges[0].newest_of_source_ms if ranges else None)
    elif opts.data_only:
        rows = _data_rows(rows, opts.include_headers)
    yield from rows


def _data_rows(batches: Iterator[pa.RecordBatch], include_headers: bool) -> Iterator[pa.RecordBatch]:
    """``dataOnly``: the data rows of ``batches`` in Spark's Kafka columns; an error row (a gap
    ``failOnDataLoss=false`` skipped) logged as a warning, as Spark's connector logs it."""
    import pyarrow.compute as pc

    names = source_schema(include_headers, data_only=True).names
    for b in batches:
        kinds = b.column("kind")
        errors = pc.equal(kinds, KIND_ERROR)
        if pc.any(errors).as_py():
            for text in b.filter(errors).column("error").to_pylist():
                logging.getLogger(__name__).warning("dataflow-kafka: %s", text)
        data = pc.equal(kinds, KIND_DATA)
        if not pc.all(data).as_py():
            b = b.filter(data)
        if b.num_rows:
            yield b.select(names)


def _read_range(opts: SourceOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Rows of one range: [modifications] [data / producer punctuations / errors] [punctuation].

    The punctuation is ``max(newest_before_ms, newest data event time in the range) - watermarkDelayMs``,
    or the end of time (``MAX_EVENT_MS``) for the last range of a bounded run with ``endOfInput=punctuate``.
    """
    hdr = opts.include_headers
    synthetic = []
    for m in r.mods:
        synthetic.append({"key": None if m.get("key") is None else m["key"].encode(),
                          "value": None if m.get("value") is None else m["value"].encode(),
                          "topic": r.topic, "partition": r.partition, "offset": r.start,
                          "timestamp": m.get("ts"), "timestampType": 0, "kind": KIND_MODIFICATION,
                          "modification": m.get("value"), "processing_time": r.processing_time_ms,
                          "control_offset": m.get("offset")})
    for note in r.notes:
        synthetic.append({"topic": r.topic, "partition": r.partition, "offset": r.start, "kind": KIND_ERROR,
                          "processing_time": r.processing_time_ms, "error": note})
    if synthetic:
        yield kafka_read.make_rows_batch(synthetic, hdr)
    newest = in_range = None
    # the rows' reader's JSON fields of the values, parsed with the event times (one pass per chunk)
    also = opts.key_group_packing.json_fields("value") if opts.key_group_packing is not None else None
    if r.end > r.start:
        with kafka_read.naming_servers(opts.kafka, f"topic {r.topic}-{r.partition} offsets [{r.start}, {r.end})"), \
                kafka_read.pooled_consumer(opts.kafka, opts.group_id_prefix, r.end - r.start) as c:
            for records, loss_note in kafka_read.fetch_range(c, r.topic, r.partition, r.start, r.end,
                                                             opts.poll_timeout_ms, opts.fail_on_data_loss,
                                                             columns=True):
                if loss_note:
                    yield kafka_read.make_rows_batch(
                        [{"topic": r.topic, "partition": r.partition, "offset": r.start, "kind": KIND_ERROR,
                          "processing_time": r.processing_time_ms, "error": loss_note}], hdr)
                if not len(records):
                    continue
                rec = kafka_read.decode(records, r.topic, r.partition, opts.event_time_field,
                                        _ahead(opts, r.processing_time_ms), also)
                in_range = _newer(in_range, rec.newest_event_ms())
                yield kafka_read.records_to_batch(rec, hdr, r.processing_time_ms)
        if r.publish_stats and opts.range_stats_topic:
            key = range_stats.range_key(r.topic, r.partition, r.start, r.end, _stats_field(opts, r.processing_time_ms),
                                        opts.kafka)
            range_stats.publish(opts.kafka, opts.range_stats_topic, key, in_range)
    newest = _newer(r.newest_before_ms, in_range)
    if r.end_of_input:
        punctuation = kafka_read.MAX_EVENT_MS   # endOfInput=punctuate: no record of the run follows
    else:
        punctuation = None if newest is None else newest - opts.watermark_delay_ms
    yield kafka_read.make_rows_batch(
        [{"topic": r.topic, "partition": r.partition, "offset": r.end, "kind": KIND_PUNCTUATION,
          "punctuation": punctuation,
          "processing_time": r.processing_time_ms}], hdr)


def _ahead(opts: SourceOptions, processing_time_ms: int) -> tuple[int, int] | None:
    """``(processing time, maxEventTimeAheadMs)`` of a batch, or None when the guard is off."""
    limit = opts.max_event_time_ahead_ms
    return None if limit is None or opts.data_only else (processing_time_ms, limit)


def _stats_field(opts: SourceOptions, processing_time_ms: int) -> str:
    """What decides a range's newest event time besides its records, for its range-stats key: the
    event-time field and the latest event time ``maxEventTimeAheadMs`` admits in its batch."""
    field = opts.event_time_field or ""
    ahead = _ahead(opts, processing_time_ms)
    return field if ahead is None else f"{field}|<={ahead[0] + ahead[1]}"


def _newer(a: int | None, b: int | None) -> int | None:
    return a if b is None else b if a is None else max(a, b)


def _split(r: OffsetRange, pieces: int) -> list[OffsetRange]:
    """Split a range for ``minPartitions``: modifications go with the first piece; every piece
    emits the punctuation of its own records (their maximum is the partition's)."""
    n = r.end - r.start
    if pieces <= 1 or n <= 1:
        return [r]
    pieces = min(pieces, n)
    bounds = [r.start + (n * i) // pieces for i in range(pieces + 1)]
    out = []
    for i in range(pieces):
        out.append(OffsetRange(r.topic, r.partition, bounds[i], bounds[i + 1], r.newest_before_ms,
                               r.processing_time_ms, r.mods if i == 0 else [], False, r.notes if i == 0 else [],
                               r.end_of_input, r.newest_of_source_ms))
    return out


def _apply_min_partitions(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges) or 1
    out = []
    for r in ranges:
        out += _split(r, -(-(r.end - r.start) * min_partitions // total))
    return out


def _apply_max_partitions(ranges: list[OffsetRange], max_partitions: int | None
                          ) -> list[OffsetRange | RangeGroup]:
    """Pack ranges into at most ``max_partitions`` tasks, largest first onto the task with the
    fewest records (ties: lowest task); each task reads its ranges in topic, partition, offset
    order. Deterministic: the same ranges give the same tasks."""
    if not max_partitions or len(ranges) <= max_partitions:
        return ranges
    bins: list[list[OffsetRange]] = [[] for _ in range(max_partitions)]
    load = [0] * max_partitions
    for r in sorted(ranges, key=lambda r: (-(r.end - r.start), r.topic, r.partition, r.start)):
        i = min(range(max_partitions), key=lambda j: (load[j], j))
        bins[i].append(r)
        load[i] += r.end - r.start
    return [RangeGroup(sorted(b, key=lambda r: (r.topic, r.partition, r.start))) for b in bins if b]


def _apply_max_records(ranges: list[OffsetRange], max_records: int | None) -> list[OffsetRange]:
    """``maxRecordsPerPartition`` (Spark's meaning): split a range into pieces of at most that
    many offsets."""
    if not max_records:
        return ranges
    return [piece for r in ranges for piece in _split(r, -(-(r.end - r.start) // max_records))]


def _tasks(ranges: list[OffsetRange], opts: SourceOptions) -> list[OffsetRange | RangeGroup]:
    """The Spark tasks of a batch's ranges: split by ``maxRecordsPerPartition`` and
    ``minPartitions``, packed by ``maxPartitions``."""
    ranges = _apply_max_records(ranges, opts.max_records_per_partition)
    return _apply_max_partitions(_apply_min_partitions(ranges, opts.min_partitions), opts.max_partitions)


def _read_control(c, opts: SourceOptions, start: dict[TP, int], upto: dict[TP, int]) -> list[dict]:
    """Control records in ``[start, upto)``, decoded; malformed ones carry an ``error``."""
    mods = []
    for (t, p), end in sorted(upto.items()):
        for msgs, note in kafka_read.fetch_range(c, t, p, start.get((t, p), 0), end,
                                                 opts.poll_timeout_ms, fail_on_data_loss=False):
            if note:
                mods.append({"error": note})
            for m in msgs:
                mod = {"ts": m.timestamp()[1], "offset": m.offset(), "partition": p,
                       "key": None if m.key() is None else m.key().decode("utf-8", "replace")}
                text, problem = _control_text(m.value())
                if problem is None:
                    mod["value"] = text
                else:
                    mod["error"] = (f"malformed control record {t}-{p}@{m.offset()}: a modification "
                                    f"must be a JSON object, got {problem}; skipped")
                mods.append(mod)
    return mods


def _control_text(raw: bytes | None) -> tuple[str | None, str | None]:
    """``(text, None)`` of a control record's value that is a JSON object, else ``(None, what it
    is)``: a null value (a tombstone of a compacted topic), bytes that are not UTF-8 JSON, or JSON
    of another type."""
    if raw is None:
        return None, "a null value (tombstone)"
    shown = repr(raw[:80]) + ("..." if len(raw) > 80 else "")
    try:
        text = raw.decode("utf-8")
        obj = json.loads(text)
    except (UnicodeDecodeError, ValueError) as e:
        return None, f"{shown}, which is not JSON ({e})"
    if not isinstance(obj, dict):
        return None, f"{shown}, JSON of type {type(obj).__name__}"
    return text, None


def _control_partitions(c, opts: SourceOptions) -> list[TP]:
    """The control topic's one partition. Modification punctuations need a total order (Enorm
    §6.2): commands are emitted in control-topic offset order (``control_offset``), which only a
    single partition gives, so a control topic with more partitions is an error."""
    from confluent_kafka import KafkaError

    md = kafka_read.list_topics(c, opts.control_topic)
    t = md.topics.get(opts.control_topic)
    if t is not None and t.error is not None and t.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        raise kafka_security.authorization_error(opts.kafka, "READ", f"topic {opts.control_topic!r}",
                                                 "the control topic (option 'controlTopic'); it may not even "
                                                 "DESCRIBE the topic")
    if t is None or t.error is not None:
        raise OptionError(f"option 'controlTopic': topic {opts.control_topic!r} does not exist")
    if len(t.partitions) != 1:
        raise OptionError(f"option 'controlTopic': topic {opts.control_topic!r} has {len(t.partitions)} "
                          "partitions; a control topic must have exactly 1 (modification punctuations need "
                          "a total order)")
    return [(opts.control_topic, p) for p in sorted(t.partitions)]


def _check_access(opts: SourceOptions) -> None:
    """Before the first batch: may the principal READ the topics and the control topic? (A
    missing ACL would otherwise fail a task later, with less to say.)"""
    needs, why = {}, {}
    for t in opts.subscribe or tuple(opts.assign or ()):
        needs[t], why[t] = ["READ"], "the source reads it"
    if opts.control_topic:
        needs[opts.control_topic], why[opts.control_topic] = ["READ"], "the control topic (option 'controlTopic')"
    with kafka_read.naming_servers(opts.kafka, describe_topics(opts)):
        kafka_security.require_topic_operations(opts.kafka, needs, why)


def _mods_and_notes(mods: list[dict]) -> tuple[list[dict], list[str]]:
    return [m for m in mods if "error" not in m], [m["error"] for m in mods if "error" in m]


class DataflowKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver side of the streaming source; ``read`` runs on executors over a pickled copy."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._c = None
        self._available_now: dict[TP, int] | None = None
        self._available_now_control: dict[TP, int] | None = None
        self._latest: dict[TP, int] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._scans: dict[tuple[TP, int, int, int], Future] = {}  # (tp, begin, end, pt) -> newest event time
        self._scan_c = None
        self._stats: range_stats.RangeStats | None = None
        self._stats_error: str | None = None
        self._stats_missed = False
        self._published: set[tuple[TP, int, int]] = set()  # ranges whose tasks this reader told to publish
        self._access_checked = False
        self._warned_end_of_input = False

    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(_c=None, _pool=None, _scans={}, _scan_c=None, _stats=None)
        return state

    def _stats_usable(self) -> bool:
        """Whether tasks publish range stats (``rangeStatsTopic``; not with ``minPartitions``, whose
        tasks read pieces of a range); the topic is created on first use."""
        if (not self.opts.range_stats_topic or self.opts.min_partitions or self.opts.max_records_per_partition
                or self.opts.data_only or self._stats_error is not None):
            return False
        if self._stats is None:
            stats = range_stats.RangeStats(self.opts.kafka, self.opts.range_stats_topic, self.opts.poll_timeout_ms)
            kafka_security.require_topic_operations(self.opts.kafka, {stats.topic: ["READ", "WRITE"]}, {
                stats.topic: "the range-stats topic (option 'rangeStatsTopic'): the tasks write each range's newest "
                             "event time and the driver reads it; grant both, or set rangeStatsTopic='' to have "
                             "the driver read every range a second time instead"})
            self._stats_error = stats.ensure_topic()
            if self._stats_error is not None:
                logging.getLogger(__name__).warning("dataflow-kafka: %s; the driver reads each range itself",
                                                    self._stats_error)
                stats.close()
                return False
            self._stats = stats
        return True

    def _consumer(self):
        if self._c is None:
            self._c = kafka_read.consumer(self.opts.kafka, self.opts.group_id_prefix)
        return self._c

    def _high(self, tps: list[TP]) -> dict[TP, int]:
        c = self._consumer()
        return kafka_read.log_offsets(c, tps, "end", self._request_timeout_s)

    @property
    def _request_timeout_s(self) -> float:
        """How long one offset request on the driver retries transient errors: 30 s, or
        ``kafkaConsumer.pollTimeoutMs`` if lower (as for the topic list)."""
        return min(30.0, self.opts.poll_timeout_ms / 1000)

    def _control_tps(self) -> list[TP]:
        return _control_partitions(self._consumer(), self.opts)

    def _fetching_offsets(self, fetch):
        """``fetch()`` (planning offsets on the driver), tried again up to ``fetchOffset.numRetries``
        times, ``fetchOffset.retryIntervalMs`` apart, when Kafka is unavailable for a reason that
        may pass (as Spark's Kafka source). Each attempt itself retries transient errors for up to
        30 s per request (``kafkaConsumer.pollTimeoutMs`` if lower), so a broker restart shorter
        than that costs only latency; a longer outage fails with the last attempt's error, naming the
        servers and the topics."""
        self._ensure_access()
        attempts = self.opts.fetch_offset_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                with kafka_read.naming_servers(self.opts.kafka, describe_topics(self.opts)):
                    return fetch()
            except kafka_read.KafkaUnavailableError as e:
                if not e.transient or attempt == attempts:
                    if attempts > 1 and e.transient:
                        raise kafka_read.KafkaUnavailableError(
                            f"{e} (after {attempts} attempts: fetchOffset.numRetries="
                            f"{self.opts.fetch_offset_retries})", True) from e
                    raise
                logging.getLogger(__name__).warning("dataflow-kafka: %s; retrying (attempt %d of %d)", e,
                                                    attempt + 1, attempts)
                time.sleep(self.opts.fetch_offset_retry_interval_ms / 1000)

    def _ensure_access(self) -> None:
        """The ACL check of :func:`_check_access`, once per reader (driver)."""
        if not self._access_checked:
            _check_access(self.opts)
            self._access_checked = True

    def initialOffset(self) -> dict:
        return self._fetching_offsets(self._initial_offset)

    def _initial_offset(self) -> dict:
        c = self._consumer()
        tps = resolve_partitions(c, self.opts)
        notes: list[str] = []
        start = starting_offsets(c, self.opts, tps, notes, self._request_timeout_s)
        offset = {"v": 2, "batchTimeMs": _now_ms(),
                  "partitions": to_json_partitions({tp: {"o": o} for tp, o in start.items()}),
                  "control": {}, "mods": {}}
        if notes:  # emitted as error rows by the first batch (latestOffset moves them into its offset)
            offset["notes"] = notes
        if self.opts.control_topic:  # commands written after the query starts
            offset["control"] = to_json_partitions({tp: h for tp, h in self._high(self._control_tps()).items()})
        return offset

    def getDefaultReadLimit(self):
        m = self.opts.max_offsets_per_trigger
        return ReadMaxRows(m) if m else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        def fetch() -> None:
            c = self._consumer()
            self._available_now = self._high(resolve_partitions(c, self.opts))
            self._available_now_control = self._high(self._control_tps()) if self.opts.control_topic else {}

        self._fetching_offsets(fetch)

    def reportLatestOffset(self):
        if self._latest is None:
            return None
        return to_json_partitions(self._latest)

    def latestOffset(self, start: dict, limit) -> dict:
        return self._fetching_offsets(lambda: self._latest_offset(start, limit))

    def _latest_offset(self, start: dict, limit) -> dict:
        c = self._consumer()
        now = _now_ms()
        prev = from_json_partitions(start["partitions"])
        if self._available_now is not None:
            # Trigger.AvailableNow reads up to the offsets fixed when the run started: no metadata or
            # offset request per batch (Spark's connector does the same)
            tps, latest = list(self._available_now), dict(self._available_now)
        else:
            tps = resolve_partitions(c, self.opts)
            latest = self._high(tps)
        new_tps = [tp for tp in tps if tp not in prev]
        low_of_new = kafka_read.log_offsets(c, new_tps, "start", self._request_timeout_s)  # new partitions: earliest
        begin = {tp: prev[tp]["o"] if tp in prev else low_of_new[tp] for tp in tps}
        self._latest = latest
        notes = list(start.get("notes", []))
        for tp in tps:
            if tp in prev and latest[tp] < begin[tp]:
                notes.append(self._offsets_went_back(c, tp, begin, latest[tp]))
        latest = {tp: max(h, begin[tp]) for tp, h in latest.items()}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = rate_limit(begin, latest, max_rows)

        control_start = from_json_partitions(start.get("control", {}))
        mods: list[dict] = []
        control_end = dict(control_start)
        if self.opts.control_topic:
            if self._available_now_control is not None:    # fixed when the run started, as the data's
                control_end = {tp: max(control_start.get(tp, 0), h) for tp, h in self._available_now_control.items()}
            else:
                control_end = self._high(self._control_tps())
            mods = _read_control(c, self.opts, control_start, control_end)
        mods += [{"error": n} for n in notes]

        moved = any(end[tp] != begin[tp] for tp in tps) or bool(new_tps) or bool(mods)
        # endOfInput=punctuate: the run's last batch punctuates to the end of time, once (a batch of its
        # own if the data ended in an earlier one), and the offset log says so for a replay.
        end_of_input = self._end_of_input(end)
        if end_of_input and not start.get("eoi"):
            moved = True
        if moved and not new_tps and not mods and self._too_few(begin, latest, now - start["batchTimeMs"]):
            return start
        hb = self.opts.heartbeat_interval_ms
        if not moved and not (hb and self._available_now is None and now - start["batchTimeMs"] >= hb):
            return start
        parts: dict[TP, dict] = {}
        for tp in tps:
            entry: dict = {"o": end[tp], "s": begin[tp]}
            newest = (self._newest_at(tp, prev[tp], start.get("v", 1), start["batchTimeMs"])
                      if tp in prev and not self.opts.data_only else None)   # dataOnly: no punctuations to plan
            if newest is not None:
                entry["p"] = newest
            parts[tp] = entry
        self._scan_ahead(parts, end, now)
        offset = {"v": 2, "batchTimeMs": now, "partitions": to_json_partitions(parts),
                  "control": to_json_partitions(control_end),
                  "mods": {str(i): m for i, m in enumerate(mods)}}
        if end_of_input:
            offset["eoi"] = True
        return offset

    def _end_of_input(self, end: dict[TP, int]) -> bool:
        """Whether a batch ending at ``end`` closes a bounded run with ``endOfInput=punctuate``:
        Trigger.AvailableNow's last batch (other triggers never end; the option is then ignored,
        with a warning)."""
        if not self.opts.end_of_input:
            return False
        if self._available_now is None:
            if not self._warned_end_of_input:
                logging.getLogger(__name__).warning(
                    "dataflow-kafka: option 'endOfInput' applies to Trigger.AvailableNow and batch reads; this "
                    "query's trigger never ends its input, so no final punctuation is written")
                self._warned_end_of_input = True
            return False
        return self._last_available_now_batch(end)

    def _too_few(self, begin: dict[TP, int], latest: dict[TP, int], since_ms: int) -> bool:
        """``minOffsetsPerTrigger`` (Spark's meaning): wait for that many new records unless
        ``maxTriggerDelay`` has passed since the previous batch (its time is in the offset, so a
        restart keeps the schedule); not under Trigger.AvailableNow."""
        least = self.opts.min_offsets_per_trigger
        if least is None or self._available_now is not None or since_ms >= self.opts.max_trigger_delay_ms:
            return False
        return sum(latest[tp] - begin[tp] for tp in latest) < least

    def _offsets_went_back(self, c, tp: TP, begin: dict[TP, int], high: int) -> str:
        """A partition's log ends below the checkpointed offset (topic deleted and recreated, log
        truncated): Spark's "offset was changed" data loss. Fails with ``failOnDataLoss=true``;
        else the partition is read from its new log start (``begin`` updated) and the returned
        message becomes an error row."""
        msg = (f"{tp[0]}-{tp[1]}'s offset was changed from {begin[tp]} to {high}, some data may have been "
               f"missed (the topic was deleted and recreated, or its log truncated)")
        if self.opts.fail_on_data_loss:
            raise kafka_read.DataLossError(msg + "; set failOnDataLoss=false to read the partition from its "
                                                 "new start instead")
        begin[tp] = kafka_read.watermarks(c, *tp, self._request_timeout_s)[0]
        return msg + f"; reading it from its new start {begin[tp]} (failOnDataLoss=false)"

    def _newest_at(self, tp: TP, entry: dict, version: int, pt: int) -> int | None:
        """Newest data event time before offset ``entry["o"]``: ``e`` in a version-1 offset;
        otherwise ``max(p, newest in [s, o))``, the range's value taken from the range stats the
        tasks left, else from the background scan started when the offset was made, else
        scanned now."""
        if version == 1:
            return entry.get("e")
        s, o = entry.get("s", entry["o"]), entry["o"]
        if s >= o:
            return entry.get("p")
        return _newer(entry.get("p"), self._range_newest(tp, s, o, pt))

    def _range_newest(self, tp: TP, s: int, o: int, pt: int) -> int | None:
        """Newest event time in ``[s, o)``, read in the batch of processing time ``pt``."""
        if self._stats_usable():
            key = range_stats.range_key(tp[0], tp[1], s, o, _stats_field(self.opts, pt), self.opts.kafka)
            hit, found = self._stats.get(key)
            if hit:
                return found
            # Only a range this reader planned with publishing tasks says the side channel fails; a
            # range of an earlier run may have had none (Trigger.AvailableNow's last batch).
            if (tp, s, o) in self._published:
                if not self._stats_missed:
                    logging.getLogger(__name__).warning(
                        "dataflow-kafka: no range stats for %s-%s [%d, %d) in %r; scanning ranges on the driver "
                        "from now on", tp[0], tp[1], s, o, self.opts.range_stats_topic)
                self._stats_missed = True  # from now on scan ahead in the background as well
        scan = self._scans.pop((tp, s, o, pt), None)
        if scan is not None:
            try:
                return scan.result()
            except Exception:  # noqa: BLE001 - the scan is a cache; the synchronous scan reports errors
                pass
        return self._scan_newest(self._consumer(), tp, s, o, pt)

    def _scan_ahead(self, parts: dict[TP, dict], end: dict[TP, int], pt: int) -> None:
        """Start scanning the ranges of the batch just planned in the background, so the next
        batch's ``p`` is ready when Spark asks for it (the executors read the same ranges
        meanwhile). Skipped when Trigger.AvailableNow has reached its end: no batch follows."""
        for stale in self._scans.values():  # ranges of a batch that was never read back
            stale.cancel()
        self._scans = {}
        if self._last_available_now_batch(end) or self.opts.data_only:
            return
        if self._stats_usable() and not self._stats_missed:
            return  # the tasks leave each range's newest event time
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dataflow-kafka-scan")
        for tp, e in parts.items():
            if e["o"] > e["s"]:
                self._scans[(tp, e["s"], e["o"], pt)] = self._pool.submit(
                    self._scan_in_background, tp, e["s"], e["o"], pt)

    def _last_available_now_batch(self, end: dict[TP, int]) -> bool:
        """Whether a batch ending at ``end`` is Trigger.AvailableNow's last: no batch of this run
        follows, so no planning needs its ranges' newest event times."""
        return self._available_now is not None and all(end[tp] >= self._available_now.get(tp, 0) for tp in end)

    def _scan_in_background(self, tp: TP, begin: int, end: int, pt: int) -> int | None:
        if self._scan_c is None:  # the scan thread's own consumer (consumers are not thread-safe)
            self._scan_c = kafka_read.consumer(self.opts.kafka, self.opts.group_id_prefix)
        return self._scan_newest(self._scan_c, tp, begin, end, pt)

    def _scan_newest(self, c, tp: TP, begin: int, end: int, pt: int) -> int | None:
        """Newest data event time in ``[begin, end)``: the same records and classification as the
        executors' read of that range."""
        newest = None
        for records, _ in kafka_read.fetch_range(c, tp[0], tp[1], begin, end, self.opts.poll_timeout_ms,
                                                 fail_on_data_loss=False, columns=True):
            newest = _newer(newest, kafka_read.newest_event_time(records, self.opts.event_time_field,
                                                                 _ahead(self.opts, pt)))
        return newest

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        prev = from_json_partitions(start["partitions"])
        cur = from_json_partitions(end["partitions"])
        mods, notes = _mods_and_notes([end["mods"][k] for k in sorted(end.get("mods", {}), key=int)])
        ranges = []
        v1 = end.get("v", 1) == 1
        # Range stats serve the next batch's planning: none after Trigger.AvailableNow's last batch.
        publish = not self._last_available_now_batch({tp: e["o"] for tp, e in cur.items()}) and self._stats_usable()
        if publish:
            self._published = set()   # the previous batch's ranges have been looked up by now
        before = {tp: e.get("e") if v1 else e.get("p") for tp, e in cur.items()}   # newest event time before each range
        newest = max((n for n in before.values() if n is not None), default=None)
        for i, (tp, e) in enumerate(sorted(cur.items())):
            s = e["s"] if "s" in e and not v1 else prev[tp]["o"] if tp in prev else e["o"]
            if publish:
                self._published.add((tp, s, e["o"]))
            ranges.append(OffsetRange(tp[0], tp[1], s, e["o"], before[tp], end["batchTimeMs"], mods,
                                      publish_stats=publish, notes=notes if i == 0 else [],
                                      end_of_input=bool(end.get("eoi")), newest_of_source_ms=newest))
        return _tasks(ranges, self.opts)

    def read(self, partition: OffsetRange | RangeGroup) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to commit: progress lives in Spark's checkpoint (as Spark's Kafka source)."""

    def stop(self) -> None:
        if self._pool is not None:
            for scan in self._scans.values():
                scan.cancel()
            self._pool.shutdown(wait=True)
            self._pool, self._scans = None, {}
        for c in (self._c, self._scan_c):
            if c is not None:
                c.close()
        self._c = self._scan_c = None
        if self._stats is not None:
            self._stats.close()
            self._stats = None


class DataflowKafkaBatchReader(DataSourceReader):
    """``spark.read``: one task per topic-partition range between starting and ending offsets
    (split by ``minPartitions``, packed by ``maxPartitions``)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[OffsetRange]:
        _check_access(self.opts)
        c = kafka_read.consumer(self.opts.kafka, self.opts.group_id_prefix)
        notes: list[str] = []
        try:
            tps = resolve_partitions(c, self.opts)
            wm = kafka_read.log_bounds(c, tps)
            start = starting_offsets(c, self.opts, tps, notes, bounds=wm)
            if self.opts.ending == "latest":
                end = {tp: wm[tp][1] for tp in tps}
            else:
                end = {}
                for tp in tps:
                    o = self.opts.ending.get(tp[0], {}).get(tp[1], -1)
                    end[tp] = wm[tp][1] if o == -1 else wm[tp][0] if o == -2 else o
            mods = []
            if self.opts.control_topic:
                ctps = _control_partitions(c, self.opts)
                cw = kafka_read.log_bounds(c, ctps)
                mods, control_notes = _mods_and_notes(_read_control(
                    c, self.opts, {tp: w[0] for tp, w in cw.items()}, {tp: w[1] for tp, w in cw.items()}))
                notes += control_notes
        finally:
            c.close()
        now = _now_ms()
        ranges = [OffsetRange(t, p, start[(t, p)], max(start[(t, p)], end[(t, p)]), None, now, mods,
                              notes=notes if i == 0 else [], end_of_input=self.opts.end_of_input)
                  for i, (t, p) in enumerate(tps)]
        return _tasks(ranges, self.opts)

    def read(self, partition: OffsetRange | RangeGroup) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)


class DataflowKafkaDataSource(DataSource):
    """``format("dataflow-kafka")``: register with ``spark.dataSource.register(DataflowKafkaDataSource)``."""

    @classmethod
    def name(cls) -> str:
        return "dataflow-kafka"

    def schema(self):
        """The source's row schema (with ``keyGroupPacking``, its packed rows'). Spark calls this in
        ``load()``: the options are validated here, so an option error surfaces there with our
        message (not after ``start()``)."""
        opts = parse_source_options(self.options, streaming=None)
        if opts.key_group_packing is not None:
            from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

            types = {"int": IntegerType(), "binary": BinaryType()}
            return StructType([StructField(n, types[t]) for n, t in opts.key_group_packing.fields])
        return source_schema(opts.include_headers, opts.data_only)

    def streamReader(self, schema) -> DataflowKafkaStreamReader:
        return DataflowKafkaStreamReader(parse_source_options(self.options, streaming=True))

    def reader(self, schema) -> DataflowKafkaBatchReader:
        return DataflowKafkaBatchReader(parse_source_options(self.options, streaming=False))

    def streamWriter(self, schema, overwrite: bool):
        from dataflow_kafka.datasource.sink import DataflowKafkaStreamWriter

        return DataflowKafkaStreamWriter(parse_sink_options(self.options), schema)

    def writer(self, schema, overwrite: bool):
        from dataflow_kafka.datasource.sink import DataflowKafkaBatchWriter

        return DataflowKafkaBatchWriter(parse_sink_options(self.options), schema)
