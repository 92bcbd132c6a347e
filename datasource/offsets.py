"""Topic-partition resolution, starting offsets and admission control (driver side).

Offsets are plain dicts so Spark can write them to its offset log::

    {"v": 2, "batchTimeMs": 1700000000000,
     "partitions": {"events": {"0": {"o": 120, "s": 100, "p": 1699999999000}, "1": {"o": 98, "s": 0}}},
     "control": {"commands": {"0": 3}},
     "mods": {"0": {"offset": 2, "partition": 0, "key": null, "value": "{...}", "ts": 1699...}}}

``o`` is the next offset to read; ``s`` where the batch ending here started reading the
partition; ``p`` the newest event time (ms) among data records this query read from the partition
before ``s`` (absent while none). The newest event time before ``o`` is therefore
``max(p, newest in [s, o))``: the tasks compute it for the batch's punctuation, the driver for the
next offset's ``p``. (Version 1 offsets, from older checkpoints, carried ``e``, the newest event
time before ``o``, instead of ``s`` and ``p``; they are still read.) ``mods`` are the
control-topic records assigned to the batch ending here.
"""

from __future__ import annotations

import re
from typing import Iterable

from dataflow_kafka.datasource import kafka_read, kafka_security
from dataflow_kafka.datasource.options import OptionError, SourceOptions

__all__ = ["TP", "describe_topics", "resolve_partitions", "starting_offsets", "rate_limit", "to_json_partitions",
           "from_json_partitions"]

TP = tuple[str, int]


def describe_topics(opts: SourceOptions) -> str:
    """What a query reads, for messages: its topics, partitions or pattern."""
    if opts.subscribe is not None:
        return f"topic(s) {', '.join(opts.subscribe)}"
    if opts.assign is not None:
        return f"partitions {', '.join(f'{t}-{p}' for t, ps in sorted(opts.assign.items()) for p in ps)}"
    return f"topics matching {opts.subscribe_pattern!r}"


#: At most this many topics named by ``subscribe`` or ``assign`` are asked for by name, a metadata
#: request each; more, or a pattern, ask for every topic's metadata in one request.
NAMED_METADATA_MAX = 4


def resolve_partitions(c, opts: SourceOptions) -> list[TP]:
    """The topic-partitions to read now, sorted; missing topics raise an error naming them.

    Topics named by ``subscribe`` or ``assign`` (up to :data:`NAMED_METADATA_MAX`) are asked for
    by name, as Spark's connector describes only them: the metadata of every topic grows with the
    cluster (docs/source.md, "What planning a batch asks Kafka"), and the driver asks at every
    batch."""
    from confluent_kafka import KafkaError, KafkaException

    names = (opts.subscribe if opts.subscribe is not None
             else tuple(opts.assign) if opts.assign is not None else None)
    by_name = names is not None and len(names) <= NAMED_METADATA_MAX
    try:
        if by_name:
            listed = {t: kafka_read.list_topics(c, t, min(30.0, opts.poll_timeout_ms / 1000)).topics.get(t)
                      for t in names}
            topics = {t: md_t for t, md_t in listed.items() if md_t is not None and md_t.error is None}
        else:
            md = kafka_read.list_topics(c, None, min(30.0, opts.poll_timeout_ms / 1000))
            topics = {name: t for name, t in md.topics.items() if t.error is None}
    except KafkaException as e:
        raise kafka_read.KafkaUnavailableError(
            f"cannot reach Kafka at kafka.bootstrap.servers={opts.kafka.get('bootstrap.servers')!r} to read "
            f"{describe_topics(opts)}: {e}", kafka_read._transient(e.args[0])) from None
    # A topic the principal may not DESCRIBE is left out of the list of all topics: ask for it by name.
    unlisted = [t for t in names or () if t not in topics]
    named = ({t: listed[t] for t in unlisted} if by_name
             else {t: kafka_read.list_topics(c, t, 10.0).topics.get(t) for t in unlisted})
    denied = sorted(t for t, md_t in named.items() if md_t is not None and md_t.error is not None
                    and md_t.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED)
    if denied:
        raise kafka_security.authorization_error(opts.kafka, "READ", f"topic {denied[0]!r}",
                                                 "the source reads it; it may not even DESCRIBE the topic")
    if opts.assign is not None:
        missing = [f"{t}-{p}" for t, ps in opts.assign.items() for p in ps
                   if t not in topics or p not in topics[t].partitions]
        if missing:
            raise OptionError(f"option 'assign': partitions {missing} do not exist on the broker")
        return sorted((t, p) for t, ps in opts.assign.items() for p in ps)
    if opts.subscribe is not None:
        missing = [t for t in opts.subscribe if t not in topics]
        if missing:
            raise OptionError(f"option 'subscribe': topic(s) {missing} do not exist on the broker "
                              f"at {opts.kafka.get('bootstrap.servers')}")
        names: Iterable[str] = opts.subscribe
    else:
        rx = re.compile(opts.subscribe_pattern or "")
        names = [t for t in topics if rx.fullmatch(t) and not t.startswith("__")]
    return sorted((t, p) for t in names for p in topics[t].partitions)


def starting_offsets(c, opts: SourceOptions, tps: list[TP], notes: list[str] | None = None,
                     timeout_s: float = 30.0, bounds: dict[TP, tuple[int, int]] | None = None) -> dict[TP, int]:
    """Resolve startingTimestamp / startingOffsetsByTimestamp / startingOffsets (Spark's order).

    ``startingOffsets`` naming a partition the query does not read (it does not exist) is an
    error, as in Spark. An offset beyond a partition's end fails with ``failOnDataLoss=true``;
    with ``false`` the partition starts at its end and a message is appended to ``notes`` (the
    caller emits it as an ``error`` row): records produced later at the offsets in between are
    read, none is skipped unseen. ``bounds``: the partitions' ``(log start, log end)`` if the
    caller asked for them already (:func:`kafka_read.log_bounds`)."""
    from confluent_kafka import TopicPartition

    wm = bounds if bounds is not None else kafka_read.log_bounds(c, tps, timeout_s)
    by_ts: dict[TP, int] | None = None
    if opts.starting_timestamp_ms is not None:
        by_ts = {tp: opts.starting_timestamp_ms for tp in tps}
    elif opts.starting_by_timestamp is not None:
        by_ts = {(t, p): ts for t, ps in opts.starting_by_timestamp.items() for p, ts in ps.items()}
        unknown = [f"{t}-{p}" for t, p in by_ts if (t, p) not in wm]
        if unknown:
            raise OptionError(f"option 'startingOffsetsByTimestamp' names unknown partitions {unknown}")
    if by_ts is not None:
        found = c.offsets_for_times([TopicPartition(t, p, ts) for (t, p), ts in by_ts.items()], timeout=30)
        out = {}
        for r in found:
            tp = (r.topic, r.partition)
            if r.offset >= 0:
                out[tp] = r.offset
            elif opts.by_timestamp_strategy == "latest":
                out[tp] = wm[tp][1]
            else:
                raise OptionError(f"no record in {r.topic}-{r.partition} has a timestamp >= {by_ts[tp]} "
                                  "(startingOffsetsByTimestampStrategy=error; use 'latest' to start at the end)")
        for tp in tps:
            out.setdefault(tp, wm[tp][1])  # not named in startingOffsetsByTimestamp: latest
        return out
    spec = opts.starting
    if spec == "earliest":
        return {tp: wm[tp][0] for tp in tps}
    if spec == "latest":
        return {tp: wm[tp][1] for tp in tps}
    unknown = sorted(f"{t}-{p}" for t, ps in spec.items() for p in ps if (t, p) not in wm)
    if unknown:
        read = sorted(f"{t}-{p}" for t, p in tps if t in spec)
        raise OptionError(f"option 'startingOffsets' names partition(s) {unknown} that do not exist on the broker "
                          f"at {opts.kafka.get('bootstrap.servers')} or are not read by this query (its "
                          f"partitions of these topics: {read})")
    out = {}
    for tp in tps:
        o = spec.get(tp[0], {}).get(tp[1])
        if o is None:
            if tp[0] in spec:
                raise OptionError(f"option 'startingOffsets' lacks partition {tp[1]} of topic {tp[0]!r}")
            o = -2
        low, high = wm[tp]
        out[tp] = low if o == -2 else high if o == -1 else o
        if o > high:
            msg = (f"option 'startingOffsets': offset {o} for {tp[0]}-{tp[1]} is beyond the end of the "
                   f"partition (log end {high})")
            if opts.fail_on_data_loss or notes is None:
                raise kafka_read.DataLossError(msg + "; set failOnDataLoss=false to start at the log end instead")
            notes.append(msg + f"; starting at the log end {high} instead (failOnDataLoss=false)")
            out[tp] = high
    return out


def rate_limit(start: dict[TP, int], latest: dict[TP, int], max_records: int | None) -> dict[TP, int]:
    """End offsets admitting at most ``max_records`` in total, shared in proportion to each
    partition's backlog (as Spark's ``maxOffsetsPerTrigger``), deterministically."""
    if max_records is None:
        return dict(latest)
    lag = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(lag.values())
    if total <= max_records:
        return dict(latest)
    share = {tp: (lag[tp] * max_records) // total for tp in lag}
    left = max_records - sum(share.values())
    for tp in sorted(lag, key=lambda tp: (-(lag[tp] - share[tp]), tp)):
        if left == 0:
            break
        if share[tp] < lag[tp]:
            share[tp] += 1
            left -= 1
    return {tp: start.get(tp, latest[tp]) + share[tp] for tp in latest}


def to_json_partitions(d: dict[TP, dict]) -> dict:
    out: dict = {}
    for (t, p), v in sorted(d.items()):
        out.setdefault(t, {})[str(p)] = v
    return out


def from_json_partitions(d: dict) -> dict[TP, dict]:
    return {(t, int(p)): v for t, ps in d.items() for p, v in ps.items()}
