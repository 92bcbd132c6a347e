"""Read one offset range of one Kafka partition into Arrow record batches.

Shared by the driver (punctuation scan, control topic) and the executors (``read()``), so both
see exactly the same records and event times. confluent_kafka is imported inside functions: a
module-level import would be pickled by value into the executors and break the source.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from dataflow_kafka.collector import collector_paused
from dataflow_kafka.datasource import kafka_security, kafka_tls
from dataflow_kafka.datasource.schema import (
    KIND_DATA, KIND_ERROR, KIND_PUNCTUATION, PUNCTUATION_HEADER, arrow_schema, spark_timestamp_type,
)
from dataflow_kafka.errors import (
    DataLossError, InvalidArgumentError, KafkaClientError, KafkaTimeoutError, KafkaUnavailableError, OptionError,
)

__all__ = ["naming_servers", "consumer", "pooled_consumer", "close_pooled_consumers", "prefetch_for", "list_topics",
           "watermarks", "log_offsets", "log_bounds", "fetch_range", "RecordColumns", "RangeRecords",
           "records_to_batch", "event_times", "event_time_problem", "event_times_and_fields", "make_rows_batch",
           "MIN_EVENT_MS", "MAX_EVENT_MS", "PARSED_PREFIX", "column_reader"]

CHUNK = 20_000
#: The prefetch classes of the pooled consumers (librdkafka's ``queued.min.messages``, records per
#: partition): a range is read by a consumer of :func:`prefetch_for` its length.
PREFETCH = (2_500, 5_000, 10_000, CHUNK)
#: Polls of 0.5 s that return nothing before a read asks for the log's bounds (a busy machine or a
#: broker just started can take a poll or two to answer; a range past the log's end gives EOF).
_SLOW_POLLS = 3


def consumer(kafka_conf: dict[str, str], group_id_prefix: str = "dataflow-kafka", prefetch: int = CHUNK):
    """A consumer for manual assignment; nothing is committed to Kafka. Its group id is
    ``kafka.group.id`` if set, else ``groupIdPrefix`` (default ``dataflow-kafka``) plus a random
    suffix, as Spark's Kafka source. Every other ``kafka.*`` option (e.g. ``isolation.level``)
    reaches librdkafka as given.

    Three settings differ from librdkafka's defaults, all because a consumer reads bounded
    offset ranges and a pooled one is reassigned from range to range (``kafka.*`` options override
    them):

    * ``fetch.queue.backoff.ms`` is 1 instead of 1000: a consumer whose prefetch queue went over
      ``queued.min.messages`` postpones its partitions' next fetch by that much, and the
      postponement outlives an ``unassign``, so a consumer reassigned to another range waited
      about that long before its first fetch (with 10, most of a 2,500-record range's time);
      0 makes librdkafka poll its queue in a busy loop (measurements: docs/source.md).
    * ``fetch.wait.max.ms`` is 1 instead of 500: after a range that ends at the end of the log,
      the consumer's last fetch waits that long at the broker for new records, and the first
      fetch of the next range queues behind it (each read of a reassigned consumer took 0.5 s on
      Apache Kafka; with 10, most of a small range's read at a trickle). A consumer is assigned
      only while it reads a range that the log holds, so the shorter wait adds no idle fetches.
      Fetch sizes stay librdkafka's (``fetch.max.bytes`` 50 MiB, ``max.partition.fetch.bytes``
      1 MiB), which Kafka honours.
    * ``queued.min.messages`` is ``prefetch`` (default ``CHUNK``, 20,000) instead of 100,000:
      librdkafka prefetches until that many records wait in its queue, so a read of 100,000
      records of 100 bytes in the middle of a long backlog transferred 23 MB for its 10 MB; with
      20,000, 11.5-13.6 MB, at the same speed for the whole partition. What is prefetched past a
      range's end is parsed, then dropped by the next ``assign``, so the pool gives shorter
      ranges a consumer that prefetches less (:func:`prefetch_for`; measured on Apache Kafka,
      docs/source.md).
    """
    conf = {"group.id": f"{group_id_prefix}-{uuid.uuid4().hex[:12]}", "enable.auto.commit": False,
            "enable.partition.eof": True, "fetch.queue.backoff.ms": 1, "fetch.wait.max.ms": 1,
            "queued.min.messages": prefetch}
    conf.update(kafka_conf)
    conf["enable.auto.commit"] = False
    conf["enable.partition.eof"] = True
    conf["auto.offset.reset"] = "error"  # an offset outside the log is reported (fetch_range), never skipped
    errors = kafka_security.ClientErrors(conf)
    c = _consumer_class()({**conf, **kafka_security.client_callbacks(errors)})
    c.client_errors = errors
    return c


_CONSUMER_CLASS = []


def _consumer_class():
    """``confluent_kafka.Consumer`` with room for the consumer's :class:`kafka_security.ClientErrors` (the C type
    takes no attributes), created on first use (confluent_kafka is imported inside functions)."""
    if not _CONSUMER_CLASS:
        from confluent_kafka import Consumer

        class DataflowKafkaConsumer(Consumer):
            client_errors: kafka_security.ClientErrors

        _CONSUMER_CLASS.append(DataflowKafkaConsumer)
    return _CONSUMER_CLASS[0]


def _conf_of(c) -> dict:
    """What a consumer of :func:`consumer` knows of its settings (servers, user), for messages."""
    errors = getattr(c, "client_errors", None)
    return errors.conf if errors is not None else {}


def _raise_if_refused(c) -> None:
    """Raise :class:`KafkaAuthenticationError` or :class:`KafkaTlsError` if the broker refused
    consumer ``c``'s login or TLS handshake. The consumer's callbacks are served first when it has
    no assignment (polling an assigned consumer would take records)."""
    errors = getattr(c, "client_errors", None)
    if errors is None:
        return
    if errors.refusal() is None:
        try:
            if not c.assignment():
                c.poll(0)
        except Exception:  # noqa: BLE001 - a closed consumer: nothing more to learn
            pass
    errors.raise_if_refused()


_idle: dict[tuple, list] = {}  # (prefetch, Kafka configuration) -> this process's idle pooled consumer(s)


def prefetch_for(records: int) -> int:
    """The prefetch class (``queued.min.messages``) of a consumer reading a range of ``records``
    offsets: the largest of ``PREFETCH`` not over a quarter of the range, at least the smallest.

    A consumer prefetching 20,000 records for a range of 2,500 (a 10k micro-batch over four
    partitions) fetches and parses about eight times what it keeps; a prefetch much under a
    quarter of a long range leaves the reader waiting for fetches. The classes and the quarter
    were chosen by measuring the CPU and time per record of ranges of 2,500, 12,500 and 50,000
    records (docs/source.md, "How a task reads")."""
    want = max(records // 4, PREFETCH[0])
    return max(q for q in PREFETCH if q <= want)


@contextlib.contextmanager
def pooled_consumer(kafka_conf: dict[str, str], group_id_prefix: str = "dataflow-kafka",
                    records: int | None = None) -> Iterator[Any]:
    """A consumer from this process's pool: one per Kafka configuration and prefetch class,
    reused by every task and micro-batch the process runs (Spark reuses its Python workers),
    closed at process exit.

    ``records``: the length of the range it is to read, which chooses its prefetch
    (:func:`prefetch_for`; ``CHUNK`` when None); a ``kafka.queued.min.messages`` option
    overrides it. A micro-batch's ranges are of about one length, so a process holds one or two
    classes' consumers.

    The consumer must be left without an assignment (:func:`fetch_range` unassigns when it
    ends): an idle consumer then sends no fetches. A use that raises (or a read abandoned
    half-way) closes its consumer instead of returning it; a second use while the pooled one is
    busy gets a consumer of its own, closed after it.
    """
    prefetch = CHUNK if records is None or "queued.min.messages" in kafka_conf else prefetch_for(records)
    key = (prefetch, group_id_prefix, *sorted(kafka_conf.items()))
    idle = _idle.setdefault(key, [])
    try:
        c = idle.pop()
    except IndexError:
        c = consumer(kafka_conf, group_id_prefix, prefetch)
    reusable = False
    try:
        yield c
        reusable = True
    finally:
        if reusable and not idle:
            idle.append(c)
        else:
            _close_quietly(c)


def _close_quietly(c) -> None:
    try:
        c.close()
    except Exception:  # noqa: BLE001 - closing a consumer of a failed read must not hide its error
        pass


@atexit.register
def close_pooled_consumers() -> None:
    """Close this process's pooled consumers (also run at interpreter exit)."""
    for idle in _idle.values():
        while idle:
            _close_quietly(idle.pop())


def _transient(err) -> bool:
    """A Kafka error a client should retry (broker restarting, leader moving).

    An unknown topic or partition counts: while the broker is down librdkafka forgets the
    cluster's metadata and answers a watermark request with ``_UNKNOWN_PARTITION`` at once, and
    Kafka's Java client treats ``UNKNOWN_TOPIC_OR_PARTITION`` as retriable too. A topic that is
    really gone is reported when the retries run out (or by the metadata checks of
    :func:`datasource.offsets.resolve_partitions`)."""
    from confluent_kafka import KafkaError

    return err.retriable() or err.code() in _transient_codes()


@functools.cache
def _transient_codes() -> frozenset[int]:
    """The codes :func:`_transient` retries beside librdkafka's own retriable flag: the ones of
    Kafka's Java client's ``RetriableException`` family that a read or an offset request meets
    while a broker restarts or a partition's leadership moves (``OFFSET_NOT_AVAILABLE``: a new
    leader whose high watermark has not caught up yet; ``FENCED_LEADER_EPOCH`` /
    ``UNKNOWN_LEADER_EPOCH``: metadata older or newer than the broker's), plus librdkafka's local
    codes for a lost connection or an unknown partition."""
    from confluent_kafka import KafkaError as E

    return frozenset((
        E._DESTROY_BROKER, E._TRANSPORT, E._ALL_BROKERS_DOWN, E._UNKNOWN_PARTITION, E._UNKNOWN_TOPIC,
        E._TIMED_OUT, E._WAIT_COORD, E.LEADER_NOT_AVAILABLE, E.NOT_LEADER_FOR_PARTITION,
        E.UNKNOWN_TOPIC_OR_PART, E.REQUEST_TIMED_OUT, E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE,
        E.COORDINATOR_LOAD_IN_PROGRESS, E.OFFSET_NOT_AVAILABLE, E.FENCED_LEADER_EPOCH,
        E.UNKNOWN_LEADER_EPOCH, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        E.KAFKA_STORAGE_ERROR, E.NETWORK_EXCEPTION, E.BROKER_NOT_AVAILABLE, E.REPLICA_NOT_AVAILABLE,
        E.PREFERRED_LEADER_NOT_AVAILABLE, E.ELIGIBLE_LEADERS_NOT_AVAILABLE))


#: the longest one attempt of a retried request waits (a request queued for a dead leader times
#: out after this, and the next attempt goes to the leader the refreshed metadata names)
ATTEMPT_TIMEOUT_S = 2.0


def _retrying(request, timeout_s: float, c=None, topics: Sequence[str] = ()):
    """``request(remaining_s)``, retried on transient errors (a broker restarting, a leader
    moving) until ``timeout_s`` have passed, as Kafka clients do. A refused login (reported by
    consumer ``c``'s error callback) is raised at once, not retried.

    Before each retry the metadata of ``topics`` is asked for again (as Kafka's Java client asks
    for a metadata update before it retries): librdkafka sends a request for a partition to the
    leader its metadata cache names, and a consumer that reads no partition does not refresh
    that cache when the leader dies, so every attempt went to the dead node until its timeout
    (30 s of offset requests timing out on a three-node cluster after a leader's SIGKILL,
    although a new leader was elected within 6 s)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return request(max(0.5, min(ATTEMPT_TIMEOUT_S, deadline - time.monotonic())))
        except KafkaException as e:
            _raise_if_refused(c)
            if time.monotonic() >= deadline or not _transient(e.args[0]):
                raise
            time.sleep(0.2)
            for topic in topics if c is not None else ():
                with contextlib.suppress(KafkaException):
                    c.list_topics(topic, timeout=max(0.5, min(2.0, deadline - time.monotonic())))


@contextlib.contextmanager
def naming_servers(kafka_conf: dict[str, str], what: str) -> Iterator[None]:
    """Turn a Kafka client error or timeout inside the block into a :class:`KafkaUnavailableError`
    naming ``kafka.bootstrap.servers`` and ``what`` was being read (e.g. ``topic t-0 offsets [5, 9)``)
    instead of a bare ``KafkaError{code=_ALL_BROKERS_DOWN,...}``; a client that could not be
    created because of a TLS setting is a :class:`KafkaTlsError` naming the option, one given a
    setting librdkafka does not know an :class:`OptionError` naming it."""
    from confluent_kafka import KafkaException

    try:
        yield
    except (KafkaException, TimeoutError) as e:
        err = e.args[0] if e.args else e
        cause = err.str() if hasattr(err, "str") else str(err)
        tls = kafka_tls.diagnose(kafka_conf, cause) if cause.startswith("Failed to create") else None
        if tls is not None:
            raise tls from None
        unknown = re.search(r'No such configuration property: "([^"]+)"', cause)
        if unknown:
            raise OptionError(f"option 'kafka.{unknown.group(1)}' is not a setting of librdkafka, the Kafka client "
                              "of dataflow-kafka (a setting of Kafka's Java client?): remove it") from None
        transient = isinstance(e, TimeoutError) or _transient(err)
        raise KafkaUnavailableError(
            f"cannot read {what} from Kafka at kafka.bootstrap.servers={kafka_conf.get('bootstrap.servers')!r}: "
            f"{cause} (is the broker up?)", transient) from e


def watermarks(c, topic: str, partition: int, timeout_s: float = 30.0) -> tuple[int, int]:
    """(log start, high watermark) of a partition; transient errors are retried."""
    from confluent_kafka import TopicPartition

    tp = TopicPartition(topic, partition)
    return _retrying(lambda t: c.get_watermark_offsets(tp, timeout=t, cached=False), timeout_s, c, (topic,))


def log_offsets(c, tps: Iterable[tuple[str, int]], which: str,
                timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
    """Each partition's log start (``which="start"``) or end (``"end"``: the high watermark, the last
    stable offset under ``isolation.level=read_committed``, as :func:`watermarks` gives it), asked
    for all partitions at once: one ``ListOffsets`` request per leader (librdkafka's
    ``offsets_for_times`` with Kafka's logical timestamps), as Spark's connector asks with one
    ``listOffsets`` call, where :func:`watermarks` is a round trip per partition. An error of the
    request or of one partition is retried as :func:`watermarks` retries it, with the metadata of
    the partitions' topics asked for again before each retry."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, KafkaException, TopicPartition

    tps = list(tps)
    if not tps:
        return {}
    logical = {"start": OFFSET_BEGINNING, "end": OFFSET_END}[which]

    def request(t: float) -> dict[tuple[str, int], int]:
        found = c.offsets_for_times([TopicPartition(topic, p, logical) for topic, p in tps], timeout=t)
        failed = next((r.error for r in found if r.error is not None), None)
        if failed is not None:
            raise KafkaException(failed)
        got = {(r.topic, r.partition): r.offset for r in found}
        missing = [tp for tp in tps if got.get(tp, -1) < 0]
        if missing:   # no offset and no error: not seen from librdkafka, kept as an error that names them
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION,
                                            f"no log {which} offset returned for {missing}"))
        return got

    return _retrying(request, timeout_s, c, sorted({t for t, _ in tps}))


def log_bounds(c, tps: Iterable[tuple[str, int]],
               timeout_s: float = 30.0) -> dict[tuple[str, int], tuple[int, int]]:
    """``(log start, log end)`` of each partition, as :func:`watermarks` gives them, in two
    requests (:func:`log_offsets`) whatever the number of partitions."""
    tps = list(tps)
    low, high = log_offsets(c, tps, "start", timeout_s), log_offsets(c, tps, "end", timeout_s)
    return {tp: (low[tp], high[tp]) for tp in tps}


def list_topics(c, topic: str | None = None, timeout_s: float = 30.0):
    """Cluster metadata (of one topic, or all); transient errors are retried."""
    return _retrying(lambda t: c.list_topics(topic, timeout=t), timeout_s, c)


def _start_lost(topic: str, partition: int, start: int, end: int, low: int, high: int,
                fail_on_data_loss: bool) -> tuple[int, str | None]:
    """Where reading ``[start, end)`` can begin given the log's ``[low, high)``, and a note when
    offsets from ``start`` on are gone (raises :class:`DataLossError` if ``fail_on_data_loss``)."""
    if low <= start <= high:
        return start, None
    lost_to = min(low, end) if low > start else end
    msg = (f"records {topic}-{partition} offsets [{start}, {lost_to}) are no longer on the broker "
           f"(log start {low}, end {high}): deleted by retention or the partition was recreated")
    if fail_on_data_loss:
        raise DataLossError(msg + "; set failOnDataLoss=false to skip them")
    return lost_to, msg + "; skipped (failOnDataLoss=false)"


def _position(c, topic: str, partition: int) -> int:
    """The consumer's fetch position in the partition (local, no broker round trip; -1001 unknown)."""
    from confluent_kafka import TopicPartition

    return c.position([TopicPartition(topic, partition)])[0].offset


def fetch_range(c, topic: str, partition: int, start: int, end: int, poll_timeout_ms: int,
                fail_on_data_loss: bool, columns: bool = False) -> Iterator[tuple[Any, str | None]]:
    """Yield ``(messages, data_loss_note)`` chunks covering offsets ``[start, end)`` in order.

    ``columns``: each chunk is a :class:`RecordColumns` instead of a list of ``confluent_kafka``
    messages, built while Python's garbage collector is held off (:func:`collector_paused`), so no
    message object outlives its poll: the source's reads take this form.

    Missing offsets (retention, truncation) raise :class:`DataLossError` when
    ``fail_on_data_loss``; otherwise the chunk carries a note saying what was skipped.

    The log's start and end are asked for (a round trip to the broker) only when the read does
    not begin with offset ``start`` itself, or reaches the log's end, or gets nothing for
    ``_SLOW_POLLS`` polls: the consumer's ``auto.offset.reset`` is ``error``, so
    a ``start`` outside the log comes back as an error instead of a silent jump, and a first
    record after ``start`` (compaction, transaction markers, or retention) is checked then.
    """
    from confluent_kafka import TopicPartition

    if start >= end:
        return
    nothing = RecordColumns.of([]) if columns else []   # the chunk of a note without records
    note = None
    c.assign([TopicPartition(topic, partition, start)])
    position = start
    checked = False  # whether the read is known to begin where the log holds ``start``
    deadline = time.monotonic() + poll_timeout_ms / 1000
    empty_polls = 0   # consecutive polls that returned nothing at all (no record, no event)
    try:
        while position < end:
            with collector_paused():
                p = _poll(c, topic, partition, position, end, columns)
            empty_polls = 0 if p.polled else empty_polls + 1
            # librdkafka reports a partition's end once per offset and client (a reused consumer
            # gets no second EOF at the same offset), so an empty poll asks for the log's end too.
            if p.first is None and not p.out_of_range and _position(c, topic, partition) >= end:
                break  # the rest of the range was transaction markers or aborted records (read_committed)
            if p.out_of_range or (p.first is None and (p.reached_eof or empty_polls >= _SLOW_POLLS)) or (
                    not checked and p.first is not None and p.first > position):
                # retried (a broker restarting) until the read's deadline, then the error names it
                low, high = watermarks(c, topic, partition, max(0.5, deadline - time.monotonic()))
                if not checked or p.out_of_range:
                    checked = True
                    begin, lost = _start_lost(topic, partition, position, end, low, high, fail_on_data_loss)
                    if lost is not None:
                        note = lost if note is None else f"{note}; {lost}"
                        if begin >= end:
                            break
                        c.assign([TopicPartition(topic, partition, begin)])
                        position = begin
                        deadline = time.monotonic() + poll_timeout_ms / 1000
                        continue
                if p.out_of_range:  # yet the log holds ``position``: fetch again, until the deadline
                    c.assign([TopicPartition(topic, partition, position)])
                elif p.first is None and high <= position:  # only transaction markers / compacted gaps remain
                    if high < end:
                        msg = (f"{topic}-{partition}: offsets [{position}, {end}) are gone "
                               f"(log end is now {high})")
                        if fail_on_data_loss:
                            raise DataLossError(msg + "; set failOnDataLoss=false to skip them")
                        yield nothing, msg + "; skipped (failOnDataLoss=false)"
                    break
            if p.first is not None:
                checked = True
                if p.last is None:   # every record polled lies at or after ``end``
                    break
                position = p.last + 1
                deadline = time.monotonic() + poll_timeout_ms / 1000
                chunk, p = p.records, None   # the caller holds the only reference
                yield chunk, note
                note = None
            if time.monotonic() > deadline:
                _raise_if_refused(c)
                raise KafkaTimeoutError(f"no records from {topic}-{partition} at offset {position} within "
                                   f"kafkaConsumer.pollTimeoutMs={poll_timeout_ms} (range ends at {end})")
        if note is not None:
            yield nothing, note
    finally:
        c.unassign()


@dataclass
class _Polled:
    """One poll of :func:`fetch_range`: whether it returned anything, the partition events it
    carried, and its records before ``end`` (``first``: offset of the first record polled, before
    ``end`` or not; ``last``: of the last one kept; both None when none)."""

    polled: bool
    reached_eof: bool
    out_of_range: bool
    first: int | None
    last: int | None
    records: Any


def _poll(c, topic: str, partition: int, position: int, end: int, columns: bool) -> _Polled:
    """One ``consume`` of up to ``CHUNK`` records for :func:`fetch_range` (errors other than the
    partition's end, an offset out of range and transient ones raise here). ``columns``: through
    :func:`column_reader` where it is available, no Python object per record."""
    from confluent_kafka import KafkaError

    want = min(CHUNK, end - position)
    reader = column_reader() if columns else None
    if reader is not None:
        polled, first, raw_errors, buffers = reader(c, want, 500, end)
        errors = [KafkaError(code, reason) for code, reason in raw_errors]
    else:
        msgs = c.consume(num_messages=want, timeout=0.5)
        polled = len(msgs)
        errors = list(map(_message_cls().error, msgs)) if any(map(_message_cls().error, msgs)) else []
    reached_eof = out_of_range = False
    for e in errors:
        if e is None or _transient(e) or e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            continue  # transient: keep polling until the deadline; the group is never used
        if e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise kafka_security.authorization_error(_conf_of(c), "READ", f"topic {topic!r}",
                                                     f"reading partition {partition} at offset {position}")
        if e.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            out_of_range = True
        elif e.code() == KafkaError._PARTITION_EOF:
            reached_eof = True
        else:
            raise KafkaClientError(f"Kafka error reading {topic}-{partition} at offset {position}: {e}")
    if reader is not None:
        if out_of_range:
            return _Polled(bool(polled), reached_eof, True, None, None, RecordColumns.of([]))
        records = RecordColumns.from_buffers(*buffers)
        return _Polled(bool(polled), reached_eof, False, first, int(records.offsets[-1]) if len(records) else None,
                       records)
    if errors:
        good = [] if out_of_range else [m for m, e in zip(msgs, errors) if e is None]
    else:
        good = msgs
    first = good[0].offset() if good else None
    if good and good[-1].offset() >= end:
        good = [m for m in good if m.offset() < end]
    last = good[-1].offset() if good else None
    return _Polled(bool(msgs), reached_eof, out_of_range, first, last,
                   RecordColumns.of(good) if columns else good)


#: confluent_kafka versions whose C consumer handle ``_rdcolumns`` reads (its first fields:
#: ``datasource/_rdcolumns.c``); another version polls through ``Consumer.consume``.
_C_READER_VERSIONS = ("2.",)


@functools.cache
def column_reader():
    """``_rdcolumns.consume`` (``datasource/_rdcolumns.c``) bound to the librdkafka confluent_kafka
    loaded: one poll of a :func:`consumer` straight into Arrow buffers, no Python object per record
    (docs/source.md, "The read in C"). None where it cannot be used, and the reads then take
    ``Consumer.consume``: the extension not built (no C compiler at install, code shipped as a
    zip), a confluent_kafka it was not checked against, no librdkafka among the process's mapped
    files (each logged once per process, at INFO), or ``DATAFLOW_KAFKA_C_READER=0`` in the
    environment (benchmarks compare the two)."""
    import logging
    import os

    if os.environ.get("DATAFLOW_KAFKA_C_READER", "1") == "0":
        return None
    poll, why_not = _bound_c_reader()
    if poll is None:
        logging.getLogger(__name__).info("dataflow-kafka: the source reads through confluent_kafka's "
                                         "Consumer.consume, not its C reader: %s", why_not)
    return poll


def _bound_c_reader():
    """``(_rdcolumns.consume bound, None)``, or ``(None, why it cannot be used)``."""
    try:
        from dataflow_kafka.datasource import _rdcolumns
    except ImportError as e:
        return None, f"the extension dataflow_kafka.datasource._rdcolumns was not built ({e})"
    from confluent_kafka import cimpl

    version = cimpl.version()      # a str in confluent_kafka 2.16, a (str, int) pair before
    version = version[0] if isinstance(version, tuple) else version
    if not version.startswith(_C_READER_VERSIONS):
        return None, f"confluent_kafka {version} is not one it was checked against ({', '.join(_C_READER_VERSIONS)}x)"
    path = _loaded_librdkafka()
    if path is None:
        return None, "no librdkafka among the process's mapped files (/proc/self/maps)"
    try:
        _rdcolumns.bind(path, cimpl.Consumer)
    except ImportError as e:
        return None, str(e)
    return _rdcolumns.consume, None


def _loaded_librdkafka() -> str | None:
    """The file of the librdkafka this process mapped (confluent_kafka's own copy), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if "/librdkafka" in path and ".so" in path:
                    return path
    except OSError:
        pass
    return None


@dataclass
class RecordColumns:
    """Consumed records as columns (what :func:`decode` reads): keys and values as Arrow binary
    arrays (lists of bytes or None are taken and converted), offsets, ``(type, ms)`` timestamps as
    an ``(n, 2)`` int64 array, headers (None or a list of ``(key, value)`` per record). None of it
    is tracked by the garbage collector, so a chunk of these costs it nothing, unlike the
    messages they may come from."""

    keys: pa.Array
    values: pa.Array
    offsets: np.ndarray
    timestamps: np.ndarray
    headers: list

    def __post_init__(self):
        if not isinstance(self.keys, pa.Array):
            self.keys = pa.array(self.keys, pa.binary())
        if not isinstance(self.values, pa.Array):
            self.values = pa.array(self.values, pa.binary())

    @classmethod
    def of(cls, msgs: list) -> "RecordColumns":
        """The columns of ``confluent_kafka`` messages."""
        n = len(msgs)
        msg = _message_cls()
        first, last = (msgs[0].offset(), msgs[-1].offset()) if n else (0, -1)
        offsets = (np.arange(first, last + 1, dtype=np.int64) if last - first + 1 == n
                   else np.fromiter(map(msg.offset, msgs), dtype=np.int64, count=n))
        return cls(list(map(msg.key, msgs)), list(map(msg.value, msgs)), offsets, _timestamps(msgs),
                   list(map(msg.headers, msgs)))

    @classmethod
    def from_buffers(cls, n: int, offsets: bytes, timestamps: bytes, keys: tuple, values: tuple,
                     headers: list) -> "RecordColumns":
        """The columns of one :func:`column_reader` poll (its buffers: ``_rdcolumns.consume``)."""
        per_record = [None] * n
        for i, h in headers:
            per_record[i] = h
        return cls(_binary_array(n, *keys), _binary_array(n, *values), np.frombuffer(offsets, np.int64),
                   np.frombuffer(timestamps, np.int64).reshape(n, 2), per_record)

    def __len__(self) -> int:
        return len(self.offsets)

    def take(self, keep: Sequence[int]) -> "RecordColumns":
        """The records at positions ``keep``, in that order."""
        idx = np.asarray(keep, dtype=np.intp)
        rows = pa.array(idx, pa.int64())
        return RecordColumns(self.keys.take(rows), self.values.take(rows), self.offsets[idx],
                             self.timestamps[idx], [self.headers[i] for i in idx])


def _binary_array(n: int, data: bytes, offsets: bytes, validity: bytes | None, nulls: int) -> pa.Array:
    """An Arrow binary array over the buffers of one column of ``_rdcolumns.consume`` (no copy)."""
    return pa.Array.from_buffers(pa.binary(), n, [None if validity is None else pa.py_buffer(validity),
                                                  pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


def _as_binary(values) -> pa.Array:
    """``values`` (an Arrow binary array, or bytes and None) as an Arrow binary array."""
    return values if isinstance(values, pa.Array) else pa.array(values, pa.binary())


def _as_list(values) -> list:
    """``values`` (an Arrow binary array, or bytes and None) as a list of bytes and None."""
    return values.to_pylist() if isinstance(values, pa.Array) else list(values)


def _lines(values: pa.Array) -> pa.Buffer:
    """The values of an Arrow binary array without nulls, joined by newlines, in one buffer."""
    listed = pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), values)
    return pc.binary_join(listed, b"\n")[0].as_buffer()


#: Event times the source accepts, in epoch ms: Spark's timestamp range, 0001-01-01 to
#: 9999-12-31 (an event time outside it, e.g. ``1e30`` or ``2**63 - 1``, is an error row).
MIN_EVENT_MS = -62_135_596_800_000
MAX_EVENT_MS = 253_402_300_799_999


#: Below this many values a chunk's event times are parsed record by record: ``pyarrow.json``'s
#: fixed cost (about 1.2 ms a call, measured at a trickle of 5 records per range) is then larger
#: than ``json.loads`` of each value (a few microseconds each).
SMALL_CHUNK = 64


def event_times(values: Sequence[bytes | None], field: str | None, timestamps_ms: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Event time per record in ms and a validity mask.

    ``field=None``: the Kafka record timestamp. Otherwise the integer epoch-ms field ``field`` of a
    JSON object value, parsed in one vectorised pass (record by record below ``SMALL_CHUNK``
    values, or when the vectorised pass refuses the chunk; both give the same result); records
    whose value is not such an object, or whose event time lies outside ``[MIN_EVENT_MS,
    MAX_EVENT_MS]``, are invalid (the caller turns them into error rows, :func:`event_time_problem`
    says why).
    """
    return event_times_and_fields(values, field, {}, timestamps_ms)[:2]


def event_times_and_fields(values: Sequence[bytes | None], field: str | None, also: dict[str, pa.DataType],
                           timestamps_ms: np.ndarray | None = None
                           ) -> tuple[np.ndarray, np.ndarray, dict[str, pa.Array] | None]:
    """:func:`event_times`, and the JSON fields ``also`` (name -> Arrow type) of the same values
    from the event times' own ``pyarrow.json`` pass: Arrow arrays, one value per record, or None
    where no such pass ran (record timestamps as event times, a chunk below ``SMALL_CHUNK``) or it
    refused them (a field not of its type, a null, empty or multi-line value; the event times are
    then parsed alone, as without ``also``). A field named in ``also`` and as ``field`` must be
    ``int64``, else ``also`` is not parsed."""
    if field is None:
        return timestamps_ms, (timestamps_ms >= 0) & (timestamps_ms <= MAX_EVENT_MS), None
    if len(values) < SMALL_CHUNK:
        return (*_event_times_per_record(_as_list(values), field), None)
    return _event_times_pass(values, field, also)


def _event_times_vectorised(values: Sequence[bytes | None], field: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`event_times` of a JSON field in one pass over the chunk (:func:`_event_times_pass`); a
    chunk it cannot take as one JSON object per line goes record by record."""
    return _event_times_pass(values, field, {})[:2]


def _event_times_pass(values: Sequence[bytes | None], field: str, also: dict[str, pa.DataType]
                      ) -> tuple[np.ndarray, np.ndarray, dict[str, pa.Array] | None]:
    """:func:`event_times_and_fields` of a chunk in one pass, whatever its size: the C scan of
    :func:`_int_fields_in_c` where every field asked is int64 and it answers, else ``pyarrow.json``."""
    n = len(values)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, bool), {f: pa.array([], t) for f, t in also.items()}
    if field in also and also[field] != pa.int64():
        also = {}
    values = _as_binary(values)
    if values.null_count:
        return (*_event_times_per_record(values.to_pylist(), field), None)
    if all(t == pa.int64() for t in also.values()):
        scanned = _int_fields_in_c(values, [field] + [f for f in also if f != field])
        if scanned is not None:
            ev, present = scanned[field]
            parsed = {f: pa.array(scanned[f][0], pa.int64(), mask=~scanned[f][1]) for f in also} if also else None
            return ev, present & (ev >= MIN_EVENT_MS) & (ev <= MAX_EVENT_MS), parsed
    buf = _lines(values)
    if np.count_nonzero(np.frombuffer(buf, np.uint8) == 10) != n - 1:  # a value spans lines
        return (*_event_times_per_record(values.to_pylist(), field), None)
    own = [(field, pa.int64())]
    tries = [(own + [(f, t) for f, t in also.items() if f != field], True)] if also else []
    for fields, with_also in tries + [(own, False)]:   # ``also`` refused: the event times alone
        try:
            table = pajson.read_json(
                pa.BufferReader(buf), read_options=pajson.ReadOptions(use_threads=False),
                parse_options=pajson.ParseOptions(explicit_schema=pa.schema(fields),
                                                  unexpected_field_behavior="ignore"))
        except (pa.ArrowInvalid, ValueError):
            continue
        if table.num_rows != n:  # empty values are skipped by the JSON reader
            break
        col = table.column(field)
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        ev = col.fill_null(0).to_numpy()
        parsed = {f: table.column(f).combine_chunks() for f in also} if with_also else None
        return ev, valid & (ev >= MIN_EVENT_MS) & (ev <= MAX_EVENT_MS), parsed
    return (*_event_times_per_record(values.to_pylist(), field), None)


def _int_fields_in_c(values: pa.Array, names: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """The int64 fields ``names`` of a binary column of JSON values without nulls as ``{name: (values,
    present)}``, read by ``datasource/_jsonints.c`` in one scan, or None: the extension not built,
    or a value it does not read certainly as ``pyarrow.json`` would (not one flat ASCII object on
    one line, a float in a named field, ...; its docstring), so the caller's ``pyarrow.json`` pass
    answers."""
    scan = _json_ints()
    if scan is None or values.type != pa.binary():
        return None
    _, offsets, data = values.buffers()
    got = scan(data if data is not None else b"", offsets, values.offset, len(values),
               tuple(n.encode() for n in names))
    if got is None:
        return None
    return {n: (np.frombuffer(v, np.int64), np.frombuffer(m, np.bool_)) for n, (v, m) in zip(names, got)}


@functools.lru_cache(maxsize=None)
def _json_ints():
    """``_jsonints.int_fields``, or None where the extension was not built (no C compiler at install)."""
    try:
        from dataflow_kafka.datasource import _jsonints
    except ImportError:
        return None
    return _jsonints.int_fields


def _event_times_per_record(values: Sequence[bytes | None], field: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`event_times` of a JSON field, one ``json.loads`` per value."""
    n = len(values)
    out = np.zeros(n, np.int64)
    valid = np.zeros(n, bool)
    for i, v in enumerate(values):
        t = _field_of(v, field)
        if isinstance(t, int) and not isinstance(t, bool) and MIN_EVENT_MS <= t <= MAX_EVENT_MS:
            out[i], valid[i] = t, True
    return out, valid


def _field_of(value: bytes | None, field: str):
    """``value``'s JSON field ``field``, or None (no JSON object, no such field)."""
    try:
        x = json.loads(value) if value else None
    except (ValueError, UnicodeDecodeError):
        return None
    return x.get(field) if isinstance(x, dict) else None


def event_time_problem(value: bytes | None, field: str | None, timestamp_ms: int) -> str:
    """Why a data record has no usable event time (for its error row; bad records only)."""
    if field is None:
        return (f"record timestamp {timestamp_ms} is outside [0, {MAX_EVENT_MS}] ms (9999-12-31)"
                if timestamp_ms >= 0 else "record has no timestamp")
    t = _field_of(value, field)
    if t is None or isinstance(t, (bool, str, list, dict)):
        return f"value is not a JSON object with integer field '{field}'"
    return (f"event time {t!r} in field '{field}' is not an integer epoch-ms within Spark's timestamp "
            f"range [{MIN_EVENT_MS}, {MAX_EVENT_MS}] (0001-01-01 to 9999-12-31)")


def newest_event_time(records: RecordColumns, field: str | None, ahead: tuple[int, int] | None = None
                      ) -> int | None:
    """Newest event time among data records of ``records`` (the driver's punctuation scan): same
    classification as :func:`decode` (``ahead`` included), without building the other columns."""
    if not len(records):
        return None
    if any(records.headers):
        marked = {i for i, h in enumerate(records.headers) if h and any(k == PUNCTUATION_HEADER for k, _ in h)}
        if marked:
            records = records.take([i for i in range(len(records)) if i not in marked])
            if not len(records):
                return None
    ts_ms = records.timestamps[:, 1]
    ev, valid = event_times(records.values, field, ts_ms)
    if ahead is not None:
        valid &= ev <= ahead[0] + ahead[1]
    return int(ev[valid].max()) if valid.any() else None


@dataclass
class RangeRecords:
    """Columns of a chunk of consumed records (plain Python / numpy)."""

    topic: str
    partition: int
    keys: pa.Array              # binary
    values: pa.Array            # binary
    offsets: np.ndarray
    timestamps_ms: np.ndarray
    timestamp_types: np.ndarray
    headers: list
    event_ms: np.ndarray
    kinds: np.ndarray           # object array of kind strings
    punctuation_ms: np.ndarray  # for producer punctuation records
    errors: list
    all_data: bool = False      # every row is a data row (the common case, cheap paths)
    fields: dict | None = None  # decode's ``also``: JSON fields of every row's value (Arrow arrays), or None

    def newest_event_ms(self) -> int | None:
        """Newest event time among the data rows, or None (the punctuation's basis)."""
        ev = self.event_ms if self.all_data else self.event_ms[self.kinds == KIND_DATA]
        return int(ev.max()) if len(ev) else None


# confluent-kafka timestamp type (0 none, 1 create, 2 log-append) -> Spark code (-1, 0, 1).
_SPARK_TS_TYPE = np.array([spark_timestamp_type(i) for i in range(4)], dtype=np.int32)


def _message_cls():
    """``confluent_kafka.Message``, whose unbound accessors ``map`` applies without a Python-level
    loop (about 20% cheaper than a list comprehension per accessor)."""
    from confluent_kafka import Message

    return Message


def _timestamps(msgs: list) -> np.ndarray:
    """``(type, ms)`` of every message as an ``(n, 2)`` int64 array (``np.fromiter`` over the
    flattened tuples: 3x faster than ``np.array`` of a list of tuples)."""
    n = len(msgs)
    flat = itertools.chain.from_iterable(map(_message_cls().timestamp, msgs))
    return np.fromiter(flat, dtype=np.int64, count=2 * n).reshape(n, 2)


def decode(records: RecordColumns, topic: str, partition: int, field: str | None,
           ahead: tuple[int, int] | None = None, also: dict[str, pa.DataType] | None = None) -> RangeRecords:
    """Column-wise decode of consumed messages; classify data / punctuation / error rows.

    ``ahead`` = (the batch's processing time, ``maxEventTimeAheadMs``): a data record whose event
    time is more than that ahead of the processing time is an error row: it must not move the
    partition's punctuation (Enorm §6.2: a punctuation is a promise about all later records).

    ``also``: JSON fields of the values (name -> Arrow type) to parse in the event times' own
    ``pyarrow.json`` pass (:func:`event_times_and_fields`), for the rows' reader
    (``keyGroupPacking``): the result's ``fields``, or None where that pass did not take them
    (record timestamps as event times, a chunk below ``SMALL_CHUNK`` or with non-data records, a
    value the pass refused)."""
    n = len(records)
    keys, values, offsets, headers = records.keys, records.values, records.offsets, records.headers
    ts = records.timestamps
    ts_ms = ts[:, 1].copy()
    ts_types = _SPARK_TS_TYPE[np.clip(ts[:, 0], 0, 3)]
    kinds = np.full(n, KIND_DATA, dtype=object)
    punct = np.zeros(n, np.int64)
    errors: list = [None] * n
    marked = [i for i, h in enumerate(headers) if h] if any(headers) else []
    for i in marked:
        for hk, hv in headers[i]:
            if hk == PUNCTUATION_HEADER:
                try:
                    value = int(hv.decode("ascii"))
                    if not MIN_EVENT_MS <= value <= MAX_EVENT_MS:
                        raise InvalidArgumentError("out of range")
                    punct[i] = value
                    kinds[i] = KIND_PUNCTUATION
                except (ValueError, AttributeError, UnicodeDecodeError):
                    kinds[i] = KIND_ERROR
                    errors[i] = (f"malformed punctuation record {topic}-{partition}@{offsets[i]}: header "
                                 f"'{PUNCTUATION_HEADER}' must be decimal epoch ms within "
                                 f"[{MIN_EVENT_MS}, {MAX_EVENT_MS}], got {hv!r}")
                break
    is_data = kinds == KIND_DATA if marked else None
    ev = valid = parsed = None
    if is_data is None or is_data.all():     # ``also`` only where every record is data (no markers)
        ev, valid, parsed = event_times_and_fields(values, field, also if is_data is None and also else {}, ts_ms)
    if ev is None:  # decode event times only for data rows
        ev = np.zeros(n, np.int64)
        valid = np.zeros(n, bool)
        idx = np.flatnonzero(is_data)
        sub_ev, sub_valid = event_times(values.take(pa.array(idx, pa.int64())), field, ts_ms[idx])
        ev[idx], valid[idx] = sub_ev, sub_valid
    bad = np.flatnonzero(~valid if is_data is None else is_data & ~valid)
    for i in bad:
        kinds[i] = KIND_ERROR
        errors[i] = (f"record {topic}-{partition}@{offsets[i]} has no event time: "
                     + event_time_problem(values[int(i)].as_py(), field, int(ts_ms[i])))
    if ahead is not None:
        pt, limit = ahead
        far = np.flatnonzero(valid & (ev > pt + limit))   # valid is False on non-data rows
        for i in far:
            kinds[i] = KIND_ERROR
            errors[i] = (f"record {topic}-{partition}@{offsets[i]} has event time {int(ev[i])} "
                         f"({_iso(int(ev[i]))}), {int(ev[i]) - pt} ms ahead of the batch's processing time "
                         f"{pt} ({_iso(pt)}); maxEventTimeAheadMs={limit}: not used as data, the "
                         f"punctuation does not move")
        bad = np.concatenate([bad, far])
    all_data = len(bad) == 0 and (is_data is None or bool(is_data.all()))
    return RangeRecords(topic, partition, keys, values, offsets, ts_ms, ts_types, headers, ev, kinds,
                        punct, errors, all_data, parsed)


_TS = pa.timestamp("us", tz="UTC")


def _iso(ms: int) -> str:
    import datetime as dt

    return (dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=ms)).isoformat()


def _ts(ms: np.ndarray, mask: np.ndarray | None = None) -> pa.Array:
    return pa.array(ms.astype(np.int64) * 1000, type=_TS, mask=mask)


def _constant(value, n: int, type_: pa.DataType) -> pa.Array:
    """An array of ``n`` copies of ``value``, built in C++."""
    return pa.nulls(n, type_).fill_null(pa.scalar(value, type_))


def records_to_batch(r: RangeRecords, include_headers: bool, processing_time_ms: int) -> pa.RecordBatch:
    n = len(r.offsets)
    all_data = r.all_data
    is_data = None if all_data else r.kinds == KIND_DATA
    is_punct = None if all_data else r.kinds == KIND_PUNCTUATION
    cols: list[pa.Array] = [
        r.keys, r.values,
        _constant(r.topic, n, pa.string()), _constant(r.partition, n, pa.int32()),
        pa.array(r.offsets), _ts(r.timestamps_ms), pa.array(r.timestamp_types),
    ]
    if include_headers:
        cols.append(pa.array([[{"key": k, "value": v} for k, v in h] if h else [] for h in r.headers],
                             pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))))
    cols += [
        _constant(KIND_DATA, n, pa.string()) if all_data else pa.array(r.kinds.tolist(), pa.string()),
        _ts(r.event_ms, None if all_data else ~is_data),
        pa.nulls(n, _TS) if all_data or not is_punct.any() else _ts(r.punctuation_ms, ~is_punct),
        pa.nulls(n, pa.string()),
        _constant(processing_time_ms * 1000, n, _TS),
        pa.nulls(n, pa.string()) if all_data else pa.array(r.errors, pa.string()),
        pa.nulls(n, pa.int64()),  # control_offset: modification rows only
    ]
    schema = arrow_schema(include_headers)
    if r.fields:          # decode's ``also``, for the rows' reader: columns beyond the source's schema
        cols += list(r.fields.values())
        schema = pa.schema(list(schema) + [pa.field(PARSED_PREFIX + f, a.type) for f, a in r.fields.items()])
    return pa.RecordBatch.from_arrays(cols, schema=schema)


#: Prefix of the columns :func:`records_to_batch` adds for :func:`decode`'s ``also`` fields
#: (``__parsed:price``); only a rows' reader (``keyGroupPacking``) sees them, never Spark.
PARSED_PREFIX = "__parsed:"


def make_rows_batch(rows: list[dict[str, Any]], include_headers: bool) -> pa.RecordBatch:
    """A batch of synthetic rows (punctuations, modifications, errors); times given in ms."""
    schema = arrow_schema(include_headers)
    fixed = []
    for row in rows:
        row = dict(row)
        for k in ("timestamp", "event_time", "punctuation", "processing_time"):
            if row.get(k) is not None:
                row[k] = int(row[k]) * 1000
        if include_headers:
            row.setdefault("headers", [])
        fixed.append(row)
    return pa.RecordBatch.from_pylist(fixed, schema=schema)
