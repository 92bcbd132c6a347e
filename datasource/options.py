"""Parse the ``dataflow-kafka`` options once, at the edge, into typed values.

Option names and meanings follow Spark's Kafka source and sink
(https://spark.apache.org/docs/latest/structured-streaming-kafka-integration.html); the options
this project adds are listed in ``OWN_OPTIONS``. Every error names the option, the value and
what is allowed. Keys are case-insensitive, as in Spark.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Mapping

from dataflow_kafka.datasource.kafka_security import librdkafka_conf
from dataflow_kafka.errors import OptionError

__all__ = ["SourceOptions", "SinkOptions", "parse_source_options", "parse_sink_options", "GROUP_ID_CAUTION",
           "DEFAULT_MAX_EVENT_TIME_AHEAD_MS"]


SPARK_SOURCE_OPTIONS = {
    "subscribe", "subscribepattern", "assign", "startingoffsets", "startingtimestamp",
    "startingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "endingoffsets",
    "endingtimestamp", "endingoffsetsbytimestamp", "maxoffsetspertrigger", "minoffsetspertrigger",
    "minpartitions", "failondataloss", "includeheaders", "kafkaconsumer.polltimeoutms",
    "maxtriggerdelay", "maxrecordsperpartition", "groupidprefix", "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
}
#: Options of this project (not in Spark's Kafka source).
OWN_OPTIONS = {
    "eventtimefield": "JSON field of the value holding the event time in epoch ms (default: the Kafka record timestamp)",
    "watermarkdelayms": "punctuation = newest event time read from the partition minus this: the watermark's "
                        "delay, like withWatermark's delayThreshold, not an operator's allowed lateness (default 0)",
    "controltopic": "topic of modification commands (JSON objects); default: none",
    "heartbeatintervalms": "run a punctuation-only micro-batch after this long without data (default: off)",
    "maxpartitions": "at most this many Spark tasks per micro-batch or batch read: offset ranges are packed "
                     "into tasks by record count, each task reads its ranges one after another (default: one "
                     "task per topic-partition, as Spark's Kafka source)",
    "maxeventtimeaheadms": "a data record whose event time is more than this ahead of the batch's processing "
                           "time is an error row and does not move the punctuation (default 86400000, one "
                           "day; -1: off)",
    "endofinput": "'punctuate': at the end of a bounded run (Trigger.AvailableNow, or a batch read) every "
                  "partition's last punctuation closes every window (9999-12-31), recorded in the offset log; "
                  "'none' (default): punctuations follow the event times, the last windows stay open",
    "rangestatstopic": "topic where streaming tasks leave each offset range's newest event time for the driver "
                       "(default 'dataflow-kafka-range-stats', created if missing; empty: the driver reads "
                       "every range a second time instead)",
}
#: Options of this project that were renamed: old name -> new name (the old name is an error).
RENAMED_OPTIONS = {"graceperiodms": ("gracePeriodMs", "watermarkDelayMs")}
_SINK_OPTIONS = {"topic", "includeheaders", "exactlyonce", "exactlyoncecommittopic"}
# Options Spark itself passes to a sink (writeStream.queryName, checkpointLocation, save(path)).
_SPARK_PASSED_SINK_OPTIONS = {"path", "checkpointlocation", "queryname"}
# Spark's Kafka source rejects these kafka.* options because the source manages them itself.
_FORBIDDEN_KAFKA = {
    "kafka.auto.offset.reset": "use startingOffsets",
    "kafka.enable.auto.commit": "offsets live in Spark's checkpoint",
    "kafka.key.deserializer": "keys are returned as binary",
    "kafka.value.deserializer": "values are returned as binary",
}
#: Spark's caution when ``kafka.group.id`` is set (Spark 3+ accepts it).
GROUP_ID_CAUTION = ("option 'kafka.group.id' is set: as in Spark, use it with caution: concurrently running "
                    "queries (or sources) with the same group id may interfere with each other, and "
                    "'groupIdPrefix' is ignored; the source assigns partitions itself and commits nothing to Kafka")
#: Default of ``maxEventTimeAheadMs``: one day. Producer clocks off by hours (a wrong time zone is
#: at most 14 h) still pass; a typo in the year (2100 for 2026) is caught.
DEFAULT_MAX_EVENT_TIME_AHEAD_MS = 86_400_000
#: Default of ``maxTriggerDelay`` (Spark's): 15 minutes.
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _kafka_conf(opts: dict[str, str], original: Mapping[str, str]) -> dict[str, str]:
    conf = {}
    for k, v in original.items():
        if str(k).lower().startswith("kafka."):
            conf[str(k)[len("kafka."):]] = str(v)
    if "bootstrap.servers" not in {k.lower() for k in conf}:
        raise OptionError("option 'kafka.bootstrap.servers' is required (e.g. 'host1:9092,host2:9092')")
    try:
        return librdkafka_conf(conf)
    except ValueError as e:
        raise OptionError(str(e)) from None


def _int(opts: dict[str, str], name: str, default: int | None, minimum: int | None = None) -> int | None:
    if name not in opts:
        return default
    raw = opts[name]
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise OptionError(f"option '{name}' must be >= {minimum}, got {value}")
    return value


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(f"option '{name}' must be 'true' or 'false', got {raw!r}")


def _offsets_json(name: str, raw: str, allow_latest: bool = True) -> dict[str, dict[int, int]]:
    try:
        parsed = json.loads(raw)
        out = {str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in parsed.items()}
    except (ValueError, AttributeError, TypeError):
        raise OptionError(f"option '{name}' must be 'earliest', 'latest' or JSON like "
                          f"{{\"topicA\":{{\"0\":23,\"1\":-2}}}}, got {raw!r}") from None
    for t, parts in out.items():
        for p, o in parts.items():
            if o < -2:
                raise OptionError(f"option '{name}': offset {o} for {t}-{p} is invalid "
                                  f"(>= 0, or -2 earliest, -1 latest)")
    return out


_DURATION_UNITS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(opts: dict[str, str], name: str, default: int) -> int:
    """A duration like Spark's time strings: ``"15m"``, ``"30s"``, ``"500ms"``, ``"2h"``, or plain ms."""
    raw = opts.get(name)
    if raw is None:
        return default
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if not m or m.group(2) not in {"", *_DURATION_UNITS}:
        raise OptionError(f"option '{name}' must be a duration like '15m', '30s', '500ms' or '2h', got {raw!r}")
    return int(m.group(1)) * _DURATION_UNITS.get(m.group(2), 1)


@dataclass(frozen=True)
class SourceOptions:
    kafka: dict[str, str]
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting: str | dict[str, dict[int, int]] = "latest"
    starting_timestamp_ms: int | None = None
    starting_by_timestamp: dict[str, dict[int, int]] | None = None
    by_timestamp_strategy: str = "error"
    ending: str | dict[str, dict[int, int]] = "latest"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    max_records_per_partition: int | None = None
    max_event_time_ahead_ms: int | None = DEFAULT_MAX_EVENT_TIME_AHEAD_MS
    group_id_prefix: str = "dataflow-kafka"
    min_partitions: int | None = None
    max_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    fetch_offset_retries: int = 3          # Spark's fetchOffset.numRetries
    fetch_offset_retry_interval_ms: int = 10   # Spark's fetchOffset.retryIntervalMs
    event_time_field: str | None = None
    watermark_delay_ms: int = 0
    control_topic: str | None = None
    heartbeat_interval_ms: int | None = None
    range_stats_topic: str | None = "dataflow-kafka-range-stats"
    end_of_input: bool = False             # endOfInput=punctuate
    extra: dict = field(default_factory=dict)


def parse_source_options(options: Mapping[str, str], streaming: bool | None) -> SourceOptions:
    """Validate ``options`` for a streaming (``readStream``) or batch (``read``) query; with
    ``streaming=None`` (``load()``, before Spark says which) only the checks common to both."""
    opts = _lower(options)
    for key, (old, new) in RENAMED_OPTIONS.items():
        if key in opts:
            raise OptionError(f"option '{old}' was renamed to '{new}' (same meaning: punctuation = "
                              f"newest event time read from the partition minus this delay); use "
                              f".option('{new}', {opts[key]!r})")
    unknown = sorted(k for k in opts if not k.startswith("kafka.")
                     and k not in SPARK_SOURCE_OPTIONS and k not in OWN_OPTIONS and k != "path")
    if unknown:
        raise OptionError(f"unknown option(s) {unknown} for format 'dataflow-kafka'; known: "
                          f"{sorted(SPARK_SOURCE_OPTIONS | set(OWN_OPTIONS))} and kafka.*")
    for k, why in _FORBIDDEN_KAFKA.items():
        if k in opts:
            raise OptionError(f"option '{k}' is not supported: {why}")
    kafka = _kafka_conf(opts, options)
    if "kafka.group.id" in opts and streaming is not None:   # once per reader, not again at load()
        logging.getLogger(__name__).warning("dataflow-kafka: %s", GROUP_ID_CAUTION)
    prefix = opts.get("groupidprefix", "dataflow-kafka").strip()
    if not prefix:
        raise OptionError("option 'groupIdPrefix' must not be empty")

    strategies = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(strategies) != 1:
        raise OptionError("exactly one of 'subscribe', 'subscribePattern' or 'assign' must be set, got "
                          + (", ".join(repr(s) for s in strategies) or "none"))
    subscribe = pattern = assign = None
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionError(f"option 'subscribe' needs a comma-separated topic list, got {opts['subscribe']!r}")
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError(f"option 'subscribePattern' is not a valid regex {pattern!r}: {e}") from None
    else:
        try:
            parsed = json.loads(opts["assign"])
            assign = {str(t): tuple(int(p) for p in ps) for t, ps in parsed.items()}
        except (ValueError, AttributeError, TypeError):
            raise OptionError(f"option 'assign' must be JSON like {{\"topicA\":[0,1]}}, got {opts['assign']!r}") from None

    def offsets_option(name: str, default: str) -> str | dict[str, dict[int, int]]:
        raw = opts.get(name, default).strip()
        if raw.lower() in ("earliest", "latest"):
            return raw.lower()
        return _offsets_json(name, raw)

    starting = offsets_option("startingoffsets", "earliest" if streaming is False else "latest")
    ending = offsets_option("endingoffsets", "latest")
    if streaming and "endingoffsets" in opts:
        raise OptionError("option 'endingOffsets' is for batch queries (spark.read) only")
    if streaming is False and starting == "latest":
        raise OptionError("option 'startingOffsets' cannot be 'latest' for batch queries")
    if streaming is False and ending == "earliest":
        raise OptionError("option 'endingOffsets' cannot be 'earliest' for batch queries")
    for only_streaming in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
        if streaming is False and only_streaming.lower() in opts:
            raise OptionError(f"option '{only_streaming}' is for streaming queries only")
    max_per_trigger = _int(opts, "maxoffsetspertrigger", None, minimum=1)
    min_per_trigger = _int(opts, "minoffsetspertrigger", None, minimum=1)
    if max_per_trigger and min_per_trigger and min_per_trigger > max_per_trigger:
        raise OptionError(f"options 'minOffsetsPerTrigger' ({min_per_trigger}) and 'maxOffsetsPerTrigger' "
                          f"({max_per_trigger}) conflict: the minimum must not exceed the maximum")
    ahead = _int(opts, "maxeventtimeaheadms", DEFAULT_MAX_EVENT_TIME_AHEAD_MS, minimum=-1)
    for unsupported in ("endingtimestamp", "endingoffsetsbytimestamp"):
        if unsupported in opts:
            raise OptionError(f"option '{unsupported}' is not supported by dataflow-kafka yet")

    by_ts = None
    if "startingoffsetsbytimestamp" in opts:
        by_ts = _offsets_json("startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"])
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got {strategy!r}")
    delay = _int(opts, "watermarkdelayms", 0, minimum=0)
    min_parts = _int(opts, "minpartitions", None, minimum=1)
    max_parts = _int(opts, "maxpartitions", None, minimum=1)
    if min_parts and max_parts and min_parts > max_parts:
        raise OptionError(f"options 'minPartitions' ({min_parts}) and 'maxPartitions' ({max_parts}) conflict: "
                          "minPartitions must not exceed maxPartitions")
    heartbeat = _int(opts, "heartbeatintervalms", None, minimum=1)
    end_of_input = opts.get("endofinput", "none").strip().lower()
    if end_of_input not in ("none", "punctuate"):
        raise OptionError(f"option 'endOfInput' must be 'none' or 'punctuate', got {opts['endofinput']!r}")
    return SourceOptions(
        kafka=kafka, subscribe=subscribe, subscribe_pattern=pattern, assign=assign,
        starting=starting, starting_timestamp_ms=_int(opts, "startingtimestamp", None, minimum=0),
        starting_by_timestamp=by_ts, by_timestamp_strategy=strategy, ending=ending,
        max_offsets_per_trigger=max_per_trigger, min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=_duration_ms(opts, "maxtriggerdelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
        max_records_per_partition=_int(opts, "maxrecordsperpartition", None, minimum=1),
        max_event_time_ahead_ms=None if ahead == -1 else ahead, group_id_prefix=prefix,
        min_partitions=min_parts, max_partitions=max_parts,
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        include_headers=_bool(opts, "includeheaders", False),
        poll_timeout_ms=_int(opts, "kafkaconsumer.polltimeoutms", 120_000, minimum=1),
        fetch_offset_retries=_int(opts, "fetchoffset.numretries", 3, minimum=0),
        fetch_offset_retry_interval_ms=_int(opts, "fetchoffset.retryintervalms", 10, minimum=0),
        event_time_field=opts.get("eventtimefield") or None,
        watermark_delay_ms=delay, control_topic=opts.get("controltopic") or None,
        heartbeat_interval_ms=heartbeat,
        range_stats_topic=opts.get("rangestatstopic", "dataflow-kafka-range-stats").strip() or None,
        end_of_input=end_of_input == "punctuate",
    )


@dataclass(frozen=True)
class SinkOptions:
    kafka: dict[str, str]
    topic: str | None
    include_headers: bool
    exactly_once: bool = False      # Kafka transactions, see datasource.sink
    commit_topic: str = "dataflow-kafka-sink-commits"


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = _lower(options)
    unknown = sorted(k for k in opts if not k.startswith("kafka.") and k not in _SINK_OPTIONS
                     and k not in _SPARK_PASSED_SINK_OPTIONS)
    if unknown:
        raise OptionError(f"unknown option(s) {unknown} for the 'dataflow-kafka' sink; known: "
                          f"{sorted(_SINK_OPTIONS)} and kafka.*")
    for k in ("kafka.key.serializer", "kafka.value.serializer"):
        if k in opts:
            raise OptionError(f"option '{k}' is not supported: key and value are written as bytes")
    return SinkOptions(_kafka_conf(opts, options), opts.get("topic"), _bool(opts, "includeheaders", False),
                       _bool(opts, "exactlyonce", False),
                       opts.get("exactlyoncecommittopic", "dataflow-kafka-sink-commits").strip()
                       or "dataflow-kafka-sink-commits")
