"""The ``dataflow-kafka`` options, written once: one table of descriptors, parsed once at the edge.

Every option of ``format("dataflow-kafka")`` is an :class:`Option` in :data:`SOURCE_OPTIONS` or
:data:`SINK_OPTIONS`: its name as users write it (keys are case-insensitive, as in Spark), the
parser that turns the string into a typed value (or refuses it, naming the option, the value and
what is allowed), the default, the queries it is for (streaming, batch or both), the field of
:class:`SourceOptions` / :class:`SinkOptions` it fills, and a one-line meaning. The parsing
(:func:`parse_source_options`, :func:`parse_sink_options`), the error texts, an unknown option's
error and the options table of docs/source.md (:func:`options_table`; a test compares them) all
come from the table; rules between options (one subscription, minimum below maximum, what a batch
query refuses) are the few named checks after it.

Spark's Kafka options keep Spark's names and meanings
(https://spark.apache.org/docs/latest/structured-streaming-kafka-integration.html); ``kafka.*``
settings go to librdkafka (:mod:`datasource.kafka_security` translates Spark's security names).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping

from dataflow_kafka.datasource.kafka_security import librdkafka_conf
from dataflow_kafka.errors import OptionError

__all__ = ["Option", "SOURCE_OPTIONS", "SINK_OPTIONS", "SourceOptions", "SinkOptions", "parse_source_options",
           "parse_sink_options", "options_table", "GROUP_ID_CAUTION", "DEFAULT_MAX_EVENT_TIME_AHEAD_MS",
           "DEFAULT_MAX_TRIGGER_DELAY_MS", "KEY_GROUP_PACKING"]

#: Which queries an option is for.
STREAM, BATCH, BOTH = "stream", "batch", "both"
#: Which side of the format reads it.
SOURCE, SINK = "source", "sink"

#: Spark's caution when ``kafka.group.id`` is set (Spark 3+ accepts it).
GROUP_ID_CAUTION = ("option 'kafka.group.id' is set: as in Spark, use it with caution: concurrently running "
                    "queries (or sources) with the same group id may interfere with each other, and "
                    "'groupIdPrefix' is ignored; the source assigns partitions itself and commits nothing to Kafka")
#: Default of ``maxEventTimeAheadMs``: one day. Producer clocks off by hours (a wrong time zone is
#: at most 14 h) still pass; a typo in the year (2100 for 2026) is caught.
DEFAULT_MAX_EVENT_TIME_AHEAD_MS = 86_400_000
#: Default of ``maxTriggerDelay`` (Spark's): 15 minutes.
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000
#: Default of ``exactlyOnceCommitTopic`` (also when given empty).
DEFAULT_COMMIT_TOPIC = "dataflow-kafka-sink-commits"

Parser = Callable[[str, str], Any]          # (raw value, option name) -> typed value, or OptionError

#: The source option by which ``keygroups.Pipeline.apply`` hands the source its routing and packing.
KEY_GROUP_PACKING = "keyGroupPacking"


@dataclass(frozen=True)
class ByQuery:
    """A default that depends on the query: ``stream`` for ``readStream`` (and ``load()``,
    before Spark says which), ``batch`` for ``read``."""

    stream: Any
    batch: Any


@dataclass(frozen=True)
class Option:
    """One option: ``name`` as users write it; ``parse(raw, name)`` its value (``None``: the text as
    given); ``field`` the options field it fills (``None``: checked only); ``default`` when absent
    (a :class:`ByQuery` when it depends on the query; ``default_doc``: as the docs table shows it);
    ``mode`` the queries it is for; ``sides`` the source, the sink or both; ``spark``: one of
    Spark's Kafka options (same name and meaning); ``doc``: one line for the docs table."""

    name: str
    doc: str
    parse: Parser | None = None
    field: str | None = None
    default: Any = None
    default_doc: str | None = None
    mode: str = BOTH
    sides: tuple[str, ...] = (SOURCE,)
    spark: bool = False

    @property
    def key(self) -> str:
        """The case-insensitive key (Spark lower-cases option keys)."""
        return self.name.lower()

    def default_for(self, streaming: bool | None) -> Any:
        if isinstance(self.default, ByQuery):
            return self.default.batch if streaming is False else self.default.stream
        return self.default

    def value(self, raw: str | None, streaming: bool | None) -> Any:
        """The option's value: parsed when given, else its default; refused for the wrong query."""
        if raw is None:
            return self.default_for(streaming)
        if self.mode == STREAM and streaming is False:
            raise OptionError(f"option '{self.name}' is for streaming queries only")
        if self.mode == BATCH and streaming:
            raise OptionError(f"option '{self.name}' is for batch queries (spark.read) only")
        return raw if self.parse is None else self.parse(raw, self.name)


# -- parsers: each error names the option, the value and what is allowed -----------------------------

def integer(minimum: int | None = None, off: int | None = None) -> Parser:
    """An integer ``>= minimum``; ``off`` (e.g. -1) means "no limit" and gives ``None``."""
    def parse(raw: str, name: str) -> int | None:
        try:
            value = int(raw)
        except ValueError:
            raise OptionError(f"option '{name}' must be an integer, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise OptionError(f"option '{name}' must be >= {minimum}, got {value}")
        return None if off is not None and value == off else value
    return parse


def boolean(raw: str, name: str) -> bool:
    """``true`` or ``false`` (any case)."""
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(f"option '{name}' must be 'true' or 'false', got {raw!r}")


def choice(*allowed: str) -> Parser:
    """One of ``allowed`` (any case), lower-cased."""
    def parse(raw: str, name: str) -> str:
        value = raw.strip().lower()
        if value not in allowed:
            raise OptionError(f"option '{name}' must be {' or '.join(repr(a) for a in allowed)}, got {raw!r}")
        return value
    return parse


_DURATION_UNITS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(raw: str, name: str) -> int:
    """A duration like Spark's time strings: ``"15m"``, ``"30s"``, ``"500ms"``, ``"2h"``, or plain ms."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if not m or m.group(2) not in {"", *_DURATION_UNITS}:
        raise OptionError(f"option '{name}' must be a duration like '15m', '30s', '500ms' or '2h', got {raw!r}")
    return int(m.group(1)) * _DURATION_UNITS.get(m.group(2), 1)


def text(empty: Any = None, required: bool = False) -> Parser:
    """The text, stripped; empty text gives ``empty`` (or is refused when ``required``)."""
    def parse(raw: str, name: str) -> Any:
        value = raw.strip()
        if not value and required:
            raise OptionError(f"option '{name}' must not be empty")
        return value or empty
    return parse


def packing(raw: str, name: str) -> Any:
    """An object that routes and packs a task's rows (:class:`keygroups.source_packing.SourcePacking`),
    base64 of its pickle, as ``keygroups.Pipeline.apply`` writes it: it has ``fields`` (the
    rows' ``(name, Spark DDL type)``) and ``pack(batches)``. Empty: none (``apply`` clears it so)."""
    if not raw.strip():
        return None
    import base64
    import binascii
    import pickle

    from pyspark import cloudpickle

    try:
        value = cloudpickle.loads(base64.b64decode(raw.strip(), validate=True))
    except (binascii.Error, pickle.UnpicklingError, ValueError, EOFError, ImportError, AttributeError,
            TypeError) as e:
        raise OptionError(f"option '{name}' is not a packing written by keygroups.Pipeline.apply: {e}") from None
    if not callable(getattr(value, "pack", None)) or not isinstance(getattr(value, "fields", None), tuple):
        raise OptionError(f"option '{name}' holds a {type(value).__name__}, not a packing written by "
                          "keygroups.Pipeline.apply")
    return value


def topic_list(raw: str, name: str) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in raw.split(",") if t.strip())
    if not topics:
        raise OptionError(f"option '{name}' needs a comma-separated topic list, got {raw!r}")
    return topics


def regex(raw: str, name: str) -> str:
    try:
        re.compile(raw)
    except re.error as e:
        raise OptionError(f"option '{name}' is not a valid regex {raw!r}: {e}") from None
    return raw


def partitions_json(raw: str, name: str) -> dict[str, tuple[int, ...]]:
    try:
        return {str(t): tuple(int(p) for p in ps) for t, ps in json.loads(raw).items()}
    except (ValueError, AttributeError, TypeError):
        raise OptionError(f"option '{name}' must be JSON like {{\"topicA\":[0,1]}}, got {raw!r}") from None


def offsets_json(raw: str, name: str) -> dict[str, dict[int, int]]:
    """``{"topic": {"partition": offset}}`` with offsets >= 0, -2 (earliest) or -1 (latest)."""
    try:
        out = {str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in json.loads(raw).items()}
    except (ValueError, AttributeError, TypeError):
        raise OptionError(f"option '{name}' must be 'earliest', 'latest' or JSON like "
                          f"{{\"topicA\":{{\"0\":23,\"1\":-2}}}}, got {raw!r}") from None
    for t, parts in out.items():
        for p, o in parts.items():
            if o < -2:
                raise OptionError(f"option '{name}': offset {o} for {t}-{p} is invalid (>= 0, or -2 earliest, -1 latest)")
    return out


def offsets(raw: str, name: str) -> str | dict[str, dict[int, int]]:
    """``earliest``, ``latest`` or :func:`offsets_json`."""
    value = raw.strip()
    return value.lower() if value.lower() in ("earliest", "latest") else offsets_json(value, name)


def refused(why: str) -> Parser:
    """An option the format does not take, and why."""
    def parse(raw: str, name: str) -> Any:
        raise OptionError(f"option '{name}' is not supported: {why}")
    return parse


def not_yet(raw: str, name: str) -> Any:
    raise OptionError(f"option '{name}' is not supported by dataflow-kafka yet")


def renamed(new: str, meaning: str) -> Parser:
    """An option of this project that was renamed: an error naming the new name."""
    def parse(raw: str, name: str) -> Any:
        raise OptionError(f"option '{name}' was renamed to '{new}' (same meaning: {meaning}); use "
                          f".option('{new}', {raw!r})")
    return parse


def punctuate(raw: str, name: str) -> bool:
    return choice("none", "punctuate")(raw, name) == "punctuate"


# -- the table ------------------------------------------------------------------------------------------

#: Options both sides take (one descriptor, in both tables).
INCLUDE_HEADERS = Option("includeHeaders", "the `headers` column: read (source), written (sink)", boolean,
                         "include_headers", False, sides=(SOURCE, SINK), spark=True)
PATH = Option("path", "passed by Spark (`load(path)`, `save(path)`); ignored", sides=(SOURCE, SINK))

_SPARK_SUBSCRIPTION = "one of `subscribe`, `subscribePattern`, `assign`"
SOURCE_OPTIONS: tuple[Option, ...] = (
    Option("subscribe", f"comma-separated topics ({_SPARK_SUBSCRIPTION})", topic_list, "subscribe", spark=True),
    Option("subscribePattern", "a regex of topic names, matched when the query plans each batch",
           regex, "subscribe_pattern", spark=True),
    Option("assign", 'JSON `{"topicA":[0,1]}`: these partitions only', partitions_json, "assign", spark=True),
    Option("startingOffsets", '`earliest`, `latest` (not in batch queries) or JSON `{"t":{"0":23,"1":-2}}` '
           "(-2 earliest, -1 latest); where a new query starts", offsets, "starting",
           ByQuery("latest", "earliest"), "`latest` (batch: `earliest`)", spark=True),
    Option("startingTimestamp", "start at the first record at or after this epoch-ms timestamp, every partition",
           integer(0), "starting_timestamp_ms", spark=True),
    Option("startingOffsetsByTimestamp", 'JSON `{"t":{"0":ts}}`: start each partition at its timestamp',
           offsets_json, "starting_by_timestamp", spark=True),
    Option("startingOffsetsByTimestampStrategy", "`error` or `latest`: when no record is at or after the timestamp",
           choice("error", "latest"), "by_timestamp_strategy", "error", spark=True),
    Option("endingOffsets", "`latest` or JSON as `startingOffsets` (not `earliest`): where a batch read ends",
           offsets, "ending", "latest", mode=BATCH, spark=True),
    Option("endingTimestamp", "not supported yet", not_yet, spark=True),
    Option("endingOffsetsByTimestamp", "not supported yet", not_yet, spark=True),
    Option("maxOffsetsPerTrigger", "at most this many offsets per micro-batch (admission control)",
           integer(1), "max_offsets_per_trigger", mode=STREAM, spark=True),
    Option("minOffsetsPerTrigger", "a micro-batch waits for this many new offsets, unless `maxTriggerDelay` passed "
           "since the previous one (its time is in the offset, so a restart keeps the schedule; ignored under "
           "`Trigger.AvailableNow`)", integer(1), "min_offsets_per_trigger", mode=STREAM, spark=True),
    Option("maxTriggerDelay", "a duration (`15m`, `30s`, `500ms`): how long `minOffsetsPerTrigger` may hold a batch",
           duration_ms, "max_trigger_delay_ms", DEFAULT_MAX_TRIGGER_DELAY_MS, "`15m`", mode=STREAM, spark=True),
    Option("maxRecordsPerPartition", "a range is split into tasks of at most this many offsets",
           integer(1), "max_records_per_partition", spark=True),
    Option("minPartitions", "at least this many Spark tasks: ranges are split", integer(1), "min_partitions",
           spark=True),
    Option("failOnDataLoss", "`true`: offsets gone from the broker fail the query; `false`: an `error` row says "
           "which were skipped", boolean, "fail_on_data_loss", True, spark=True),
    INCLUDE_HEADERS,
    Option("kafkaConsumer.pollTimeoutMs", "how long a task waits for Kafka to deliver a range",
           integer(1), "poll_timeout_ms", 120_000, spark=True),
    Option("fetchOffset.numRetries", "planning a batch on the driver is tried again this many times when Kafka is "
           "unavailable", integer(0), "fetch_offset_retries", 3, spark=True),
    Option("fetchOffset.retryIntervalMs", "milliseconds between those tries", integer(0), "fetch_offset_retry_interval_ms", 10,
           spark=True),
    Option("groupIdPrefix", "prefix of the consumers' random group ids (ignored when `kafka.group.id` is set)",
           text(required=True), "group_id_prefix", "dataflow-kafka", spark=True),
    Option("kafka.auto.offset.reset", "not supported, as in Spark: use `startingOffsets`",
           refused("use startingOffsets"), spark=True),
    Option("kafka.enable.auto.commit", "not supported, as in Spark: offsets live in Spark's checkpoint",
           refused("offsets live in Spark's checkpoint"), spark=True),
    Option("kafka.key.deserializer", "not supported, as in Spark: keys are returned as binary",
           refused("keys are returned as binary"), spark=True),
    Option("kafka.value.deserializer", "not supported, as in Spark: values are returned as binary",
           refused("values are returned as binary"), spark=True),
    Option("eventTimeField", "integer epoch-ms field of a JSON-object value: the event time", text(),
           "event_time_field", None, "Kafka timestamp"),
    Option("watermarkDelayMs", "punctuation = newest event time read from the partition minus this: the "
           "watermark's delay (as `withWatermark`'s delay threshold), not an operator's allowed lateness",
           integer(0), "watermark_delay_ms", 0),
    Option("gracePeriodMs", "renamed to `watermarkDelayMs`: an error saying so",
           renamed("watermarkDelayMs", "punctuation = newest event time read from the partition minus this delay")),
    Option("maxEventTimeAheadMs", "a data record whose event time is more than this ahead of the batch's processing "
           "time (recorded in the offset) is an `error` row and does not move the punctuation (one year-2100 typo "
           "would otherwise make every later record late); one day lets clocks hours off through; -1: off",
           integer(-1, off=-1), "max_event_time_ahead_ms", DEFAULT_MAX_EVENT_TIME_AHEAD_MS, "86400000 (1 day)"),
    Option("controlTopic", "topic of modification commands (JSON objects), read from the query's start on; it "
           "must have exactly one partition (commands need a total order), else the query fails when it starts",
           text(), "control_topic", None, "none"),
    Option("heartbeatIntervalMs", "when no data arrives, run a punctuation-only batch this often (moves "
           "processing time)", integer(1), "heartbeat_interval_ms", None, "off"),
    Option("maxPartitions", "at most this many Spark tasks per micro-batch or batch read: ranges are packed into "
           "tasks by record count, a task reads its ranges one after another (each range still emits its own "
           "rows and punctuation)", integer(1), "max_partitions", None, "one task per topic-partition"),
    Option("rangeStatsTopic", "topic where streaming tasks leave each range's newest event time for the driver "
           "(created if missing; empty: the driver reads each range a second time)", text(),
           "range_stats_topic", "dataflow-kafka-range-stats"),
    Option("endOfInput", "`punctuate`: a bounded run (`Trigger.AvailableNow`, or a batch read) ends by closing "
           "every window: every partition's last punctuation is 9999-12-31, recorded in the offset log; `none`: "
           "the last windows stay open", punctuate, "end_of_input", False, "`none`"),
    Option("dataOnly", "`true`: the rows and columns of Spark's Kafka connector only (`key`, `value`, `topic`, "
           "`partition`, `offset`, `timestamp`, `timestampType`, and `headers` with `includeHeaders`): the data "
           "records, no punctuation, modification or error rows, no event-time columns and no range stats, for "
           "queries of Spark's own operators (a stage pipeline needs the markers). A producer's punctuation records "
           "are left out as markers; a gap `failOnDataLoss=false` skips is logged as a warning, as Spark's connector "
           "does", boolean, "data_only", False),
    Option(KEY_GROUP_PACKING, "set by `keygroups.Pipeline.apply(reader)`, not by hand: the first operator's "
           "routing and packing, run in the source's tasks, whose rows are then `(key_group, payload)`: one per "
           "task and key group, an Arrow IPC stream of its rows ([ARCHITECTURE.md](ARCHITECTURE.md))", packing,
           "key_group_packing", None, "off"),
    PATH,
)

SINK_OPTIONS: tuple[Option, ...] = (
    Option("topic", "the topic of every row (else each row's `topic` column)", None, "topic", None, "none",
           sides=(SINK,), spark=True),
    INCLUDE_HEADERS,
    Option("kafka.key.serializer", "not supported, as in Spark: key and value are written as bytes",
           refused("key and value are written as bytes"), sides=(SINK,), spark=True),
    Option("kafka.value.serializer", "not supported, as in Spark: key and value are written as bytes",
           refused("key and value are written as bytes"), sides=(SINK,), spark=True),
    Option("exactlyOnce", "`true`: each task writes its rows and a marker in one Kafka transaction; consumers "
           "reading `read_committed` see every row once (`writeStream` only)", boolean, "exactly_once", False,
           sides=(SINK,)),
    Option("exactlyOnceCommitTopic", "where the markers go (one partition, created when the query starts)",
           text(empty=DEFAULT_COMMIT_TOPIC), "commit_topic", DEFAULT_COMMIT_TOPIC, sides=(SINK,)),
    PATH,
    Option("checkpointLocation", "passed by Spark; ignored", sides=(SINK,)),
    Option("queryName", "passed by Spark; ignored", sides=(SINK,)),
)


@dataclass(frozen=True)
class SourceOptions:
    """The source's options, parsed (each field filled from :data:`SOURCE_OPTIONS`, defaults there)."""

    kafka: dict[str, str]
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: dict[str, tuple[int, ...]] | None
    starting: str | dict[str, dict[int, int]]
    starting_timestamp_ms: int | None
    starting_by_timestamp: dict[str, dict[int, int]] | None
    by_timestamp_strategy: str
    ending: str | dict[str, dict[int, int]]
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    max_records_per_partition: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    fetch_offset_retries: int             # Spark's fetchOffset.numRetries
    fetch_offset_retry_interval_ms: int   # Spark's fetchOffset.retryIntervalMs
    group_id_prefix: str
    event_time_field: str | None
    watermark_delay_ms: int
    max_event_time_ahead_ms: int | None  # None: off
    control_topic: str | None
    heartbeat_interval_ms: int | None
    max_partitions: int | None
    range_stats_topic: str | None
    end_of_input: bool                   # endOfInput=punctuate
    key_group_packing: Any               # keyGroupPacking: a keygroups.source_packing.SourcePacking, or None
    data_only: bool                      # dataOnly: Spark's Kafka rows and columns, data records only


@dataclass(frozen=True)
class SinkOptions:
    """The sink's options, parsed (each field filled from :data:`SINK_OPTIONS`, defaults there)."""

    kafka: dict[str, str]
    topic: str | None
    include_headers: bool
    exactly_once: bool                  # Kafka transactions, see datasource.sink
    commit_topic: str


# -- parsing ------------------------------------------------------------------------------------------

def _given(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _kafka_conf(options: Mapping[str, str]) -> dict[str, str]:
    conf = {str(k)[len("kafka."):]: str(v) for k, v in options.items() if str(k).lower().startswith("kafka.")}
    if "bootstrap.servers" not in {k.lower() for k in conf}:
        raise OptionError("option 'kafka.bootstrap.servers' is required (e.g. 'host1:9092,host2:9092')")
    try:
        return librdkafka_conf(conf)
    except ValueError as e:
        raise OptionError(str(e)) from None


def _parse(table: tuple[Option, ...], options: Mapping[str, str], streaming: bool | None, what: str) -> dict:
    """``{field: value}`` of every option of ``table``; an unknown key (other than ``kafka.*``) is
    refused, listing the known ones."""
    given = _given(options)
    known = {o.key: o for o in table}
    unknown = sorted(k for k in given if k not in known and not k.startswith("kafka."))
    if unknown:
        raise OptionError(f"unknown option(s) {unknown} for {what}; known: "
                          f"{sorted(o.name for o in table if not o.key.startswith('kafka.'))} and kafka.*")
    return {o.field if o.field else o.key: o.value(given.get(o.key), streaming) for o in table}


def _one_subscription(v: dict, streaming: bool | None) -> None:
    given = [n for n, f in (("subscribe", "subscribe"), ("subscribePattern", "subscribe_pattern"), ("assign", "assign"))
             if v[f] is not None]
    if len(given) != 1:
        raise OptionError("exactly one of 'subscribe', 'subscribePattern' or 'assign' must be set, got "
                          + (", ".join(repr(s) for s in given) or "none"))


def _ordered(low: tuple[str, str], high: tuple[str, str]) -> Callable[[dict, bool | None], None]:
    """A check that option ``low`` (name, field) does not exceed ``high``."""
    def check(v: dict, streaming: bool | None) -> None:
        lo, hi = v[low[1]], v[high[1]]
        if lo and hi and lo > hi:
            raise OptionError(f"options '{low[0]}' ({lo}) and '{high[0]}' ({hi}) conflict: {low[0]} must not exceed "
                              f"{high[0]}")
    return check


def _batch_bounds(v: dict, streaming: bool | None) -> None:
    if streaming is False and v["starting"] == "latest":
        raise OptionError("option 'startingOffsets' cannot be 'latest' for batch queries")
    if streaming is False and v["ending"] == "earliest":
        raise OptionError("option 'endingOffsets' cannot be 'earliest' for batch queries")


def _data_only(v: dict, streaming: bool | None) -> None:
    """``dataOnly`` yields data records in Spark's columns: the options about markers and event times
    would be silently without effect, so they are refused."""
    if not v["data_only"]:
        return
    marking = [n for n, f, unset in (("controlTopic", "control_topic", None), ("eventTimeField", "event_time_field", None),
                                     ("watermarkDelayMs", "watermark_delay_ms", 0),
                                     ("heartbeatIntervalMs", "heartbeat_interval_ms", None),
                                     ("endOfInput", "end_of_input", False), (KEY_GROUP_PACKING, "key_group_packing", None))
               if v[f] != unset]
    if marking:
        raise OptionError(f"option 'dataOnly' gives the data records in Spark's Kafka columns, without the event "
                          f"times, punctuations and commands that {', '.join(repr(n) for n in marking)} "
                          f"concern: remove {'it' if len(marking) == 1 else 'them'}, or dataOnly (a stage pipeline "
                          f"needs the markers: give keygroups.Pipeline.apply a reader without dataOnly)")


#: Rules between source options, after each option is parsed.
SOURCE_CHECKS = (_one_subscription, _batch_bounds, _data_only,
                 _ordered(("minOffsetsPerTrigger", "min_offsets_per_trigger"),
                          ("maxOffsetsPerTrigger", "max_offsets_per_trigger")),
                 _ordered(("minPartitions", "min_partitions"), ("maxPartitions", "max_partitions")))


def _filled(cls: type, kafka: dict[str, str], values: dict) -> Any:
    return cls(kafka=kafka, **{f.name: values[f.name] for f in fields(cls) if f.name != "kafka"})


def parse_source_options(options: Mapping[str, str], streaming: bool | None) -> SourceOptions:
    """Validate ``options`` for a streaming (``readStream``) or batch (``read``) query; with
    ``streaming=None`` (``load()``, before Spark says which) only the checks common to both."""
    values = _parse(SOURCE_OPTIONS, options, streaming, "format 'dataflow-kafka'")
    for check in SOURCE_CHECKS:
        check(values, streaming)
    kafka = _kafka_conf(options)
    if "kafka.group.id" in _given(options) and streaming is not None:   # once per reader, not again at load()
        logging.getLogger(__name__).warning("dataflow-kafka: %s", GROUP_ID_CAUTION)
    return _filled(SourceOptions, kafka, values)


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the sink's ``options`` (the same for ``writeStream`` and ``write``)."""
    values = _parse(SINK_OPTIONS, options, None, "the 'dataflow-kafka' sink")
    return _filled(SinkOptions, _kafka_conf(options), values)


# -- the docs table -------------------------------------------------------------------------------------

def _default_doc(o: Option) -> str:
    if o.default_doc is not None:
        return o.default_doc
    if o.field is None:
        return ""
    return "none" if o.default is None else f"`{str(o.default).lower() if isinstance(o.default, bool) else o.default}`"


def options_table() -> str:
    """The options of the source and the sink as the Markdown table of docs/source.md: option,
    side (source, sink), queries, default, meaning; Spark's options marked."""
    rows = ["| option | for | default | meaning |", "| --- | --- | --- | --- |"]
    for o in dict.fromkeys(SOURCE_OPTIONS + SINK_OPTIONS):          # an option of both sides once
        queries = {STREAM: " (streaming only)", BATCH: " (batch only)", BOTH: ""}[o.mode]
        mark = " (Spark)" if o.spark else ""
        rows.append(f"| `{o.name}`{mark} | {' and '.join(o.sides)}{queries} | {_default_doc(o)} | {o.doc} |")
    return "\n".join(rows) + "\n"
