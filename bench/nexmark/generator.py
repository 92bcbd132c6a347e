"""A seeded generator of NEXMark's event stream, and writing it to Kafka.

The shape follows the NEXMark generator of Beam's nexmark suite (the facts, not its code): event
``i`` of every block of 50 is a person (offset 0), an auction (offsets 1-3) or a bid (offsets
4-49), so persons, auctions and bids come at 1:3:46. Ids start at 1000. A bid goes to a *hot*
auction (the first of the latest hundred) with probability 1 - 1/``hot_auction_ratio``, else to
one of the ``in_flight_auctions`` latest auctions or one of the next 10 (a bid may name an
auction not created yet, as in NEXMark); its bidder is a hot person with probability
1 - 1/``hot_bidder_ratio``, else one of the ``active_people`` latest people or the next 10.
Prices are ``round(10 ** (6 u) * 100)`` for ``u`` uniform in [0, 1) (cents).

Event time: event ``i`` happens at ``start_ms + i * 1000 // events_per_s``. A share ``delayed`` of
the events (drawn from a second seeded stream, so the same events with 0% and 10% delayed are
the same events) **arrive** up to ``max_delay_ms`` later than they happen (uniform in
``[1, max_delay_ms]``); every other event arrives when it happens. Kafka holds each type in its
own topic (``<prefix>-person``, ``-auction``, ``-bid``), event ``i`` in partition ``i % partitions``,
each partition in arrival order. Values are JSON objects with the event time in ``dateTime``
(epoch ms: the source's ``eventTimeField``).

>>> ev = generate(NexmarkConfig(events=100, seed=3))
>>> [sum(e.kind == k for e in ev) for k in ("person", "auction", "bid")]
[2, 6, 92]
>>> b = next(e for e in ev if e.kind == "bid"); sorted(b.record)
['auction', 'bidder', 'dateTime', 'extra', 'price']
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass, field
from typing import Iterable, Sequence

__all__ = ["NexmarkConfig", "Event", "generate", "bids", "topics", "produce", "KINDS", "FIRST_ID"]

KINDS = ("person", "auction", "bid")
PROPORTION = 50                 # events per block: 1 person, 3 auctions, 46 bids
_PERSON, _AUCTION = 1, 3
FIRST_ID = 1000                 # first person and auction id
_FIRST_CATEGORY = 10
_ID_LEAD = 10                   # ids not created yet that a bid or an auction may name
_HOT_BLOCK = 100                # hot auctions / people: the first of the latest hundred


@dataclass(frozen=True)
class NexmarkConfig:
    """What to generate; every field has NEXMark's meaning (module docstring)."""

    events: int
    seed: int = 1
    events_per_s: int = 1000
    start_ms: int = 1_767_225_600_000          # 2026-01-01T00:00:00Z
    delayed: float = 0.0
    max_delay_ms: int = 5000
    partitions: int = 4
    hot_auction_ratio: int = 2
    hot_bidder_ratio: int = 4
    in_flight_auctions: int = 100
    active_people: int = 1000
    extra_bytes: int = 16

    def __post_init__(self) -> None:
        if self.events < 0:
            raise ValueError(f"events={self.events!r}: expected a count >= 0")
        if not 0.0 <= self.delayed <= 1.0:
            raise ValueError(f"delayed={self.delayed!r}: expected a share in [0, 1]")
        if self.max_delay_ms < 1 or self.events_per_s < 1 or self.partitions < 1:
            raise ValueError("max_delay_ms, events_per_s and partitions must be >= 1")


@dataclass(frozen=True)
class Event:
    """One generated event: its number, type, event time, arrival time, partition and JSON record."""

    i: int
    kind: str
    ts_ms: int
    arrival_ms: int
    partition: int
    record: dict = field(hash=False, compare=False)

    @property
    def delay_ms(self) -> int:
        return self.arrival_ms - self.ts_ms

    def value(self) -> bytes:
        return json.dumps(self.record, separators=(",", ":")).encode()


def _last_person(i: int) -> int:
    """Base-0 id of the latest person at event ``i`` (the one generated at ``i`` if it is a person)."""
    return i // PROPORTION


def _last_auction(i: int) -> int:
    """Base-0 id of the latest auction at event ``i`` (the one generated at ``i`` if it is one)."""
    epoch, offset = divmod(i, PROPORTION)
    if offset < _PERSON:
        epoch, offset = epoch - 1, _AUCTION - 1
    elif offset >= _PERSON + _AUCTION:
        offset = _AUCTION - 1
    else:
        offset -= _PERSON
    return epoch * _AUCTION + offset


def _some_person(i: int, rng: random.Random, cfg: NexmarkConfig) -> int:
    people = _last_person(i) + 1
    active = min(people, cfg.active_people)
    return people - active + rng.randrange(active + _ID_LEAD)


def _some_auction(i: int, rng: random.Random, cfg: NexmarkConfig) -> int:
    last = _last_auction(i)
    lo = max(last - cfg.in_flight_auctions, 0)
    return lo + rng.randrange(last - lo + 1 + _ID_LEAD)


def _price(rng: random.Random) -> int:
    return round(10.0 ** (rng.random() * 6.0) * 100.0)


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(string.ascii_lowercase, k=n))


def _record(i: int, kind: str, ts: int, rng: random.Random, cfg: NexmarkConfig) -> dict:
    if kind == "person":
        return {"id": FIRST_ID + _last_person(i), "name": _text(rng, 8), "emailAddress": _text(rng, 10) + "@x.com",
                "creditCard": " ".join(str(rng.randrange(1000, 10000)) for _ in range(4)),
                "city": rng.choice(("Phoenix", "Portland", "Seattle", "Boise", "Bend")),
                "state": rng.choice(("AZ", "OR", "WA", "ID", "CA")), "dateTime": ts,
                "extra": _text(rng, cfg.extra_bytes)}
    if kind == "auction":
        hot_seller = rng.randrange(cfg.hot_auction_ratio) > 0
        seller = (_last_person(i) // _HOT_BLOCK) * _HOT_BLOCK if hot_seller else _some_person(i, rng, cfg)
        initial = _price(rng)
        return {"id": FIRST_ID + _last_auction(i), "itemName": _text(rng, 12), "description": _text(rng, 20),
                "initialBid": initial, "reserve": initial + _price(rng), "dateTime": ts,
                "expires": ts + 1 + rng.randrange(20_000), "seller": FIRST_ID + seller,
                "category": _FIRST_CATEGORY + rng.randrange(5), "extra": _text(rng, cfg.extra_bytes)}
    hot = rng.randrange(cfg.hot_auction_ratio) > 0
    auction = (_last_auction(i) // _HOT_BLOCK) * _HOT_BLOCK if hot else _some_auction(i, rng, cfg)
    hot_bidder = rng.randrange(cfg.hot_bidder_ratio) > 0
    bidder = (_last_person(i) // _HOT_BLOCK) * _HOT_BLOCK + 1 if hot_bidder else _some_person(i, rng, cfg)
    return {"auction": FIRST_ID + auction, "bidder": FIRST_ID + bidder, "price": _price(rng), "dateTime": ts,
            "extra": _text(rng, cfg.extra_bytes)}


def _kind(i: int) -> str:
    offset = i % PROPORTION
    return "person" if offset < _PERSON else "auction" if offset < _PERSON + _AUCTION else "bid"


def generate(cfg: NexmarkConfig, kinds: Sequence[str] = KINDS) -> list[Event]:
    """The events of ``cfg`` in arrival order (ties by event number); ``kinds``: only events of
    these kinds are made (the others' numbers are skipped, so ids and times stay NEXMark's; the
    random fields differ from a run that makes every kind)."""
    rng = random.Random(cfg.seed)
    late = random.Random(cfg.seed * 7919 + 17)
    wanted = frozenset(kinds)
    out = []
    for i in range(cfg.events):
        kind = _kind(i)
        if kind not in wanted:
            continue
        ts = cfg.start_ms + i * 1000 // cfg.events_per_s
        delayed = late.random() < cfg.delayed
        delay = late.randint(1, cfg.max_delay_ms) if delayed else 0
        out.append(Event(i, kind, ts, ts + delay, i % cfg.partitions, _record(i, kind, ts, rng, cfg)))
    out.sort(key=lambda e: (e.arrival_ms, e.i))
    return out


def bids(events: Iterable[Event]) -> list[dict]:
    """The bid records of ``events`` (any order)."""
    return [e.record for e in events if e.kind == "bid"]


def topics(prefix: str) -> dict[str, str]:
    """``{kind: topic}`` for a topic prefix."""
    return {k: f"{prefix}-{k}" for k in KINDS}


def produce(bootstrap: str, prefix: str, events: Sequence[Event], partitions: int,
            kinds: Sequence[str] = KINDS, create: bool = True) -> dict[str, str]:
    """Write ``events`` of ``kinds`` to their topics (created with ``partitions`` partitions unless
    ``create`` is false), each partition in arrival order; returns ``{kind: topic}``."""
    from confluent_kafka import Producer
    from dataflow_kafka.brokers.admin import create_topics

    names = {k: t for k, t in topics(prefix).items() if k in kinds}
    if create:
        create_topics(bootstrap, {t: partitions for t in names.values()}, timeout_s=15)
    # idempotent: a retried request (a slow or restarting broker) can neither reorder a partition nor
    # write a record twice, so each partition holds the events in arrival order, once
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000, "log_level": 3,
                  "enable.idempotence": True})
    errors: list = []
    for e in events:
        if e.kind not in names:
            continue
        while True:
            try:
                p.produce(names[e.kind], value=e.value(), partition=e.partition % partitions,
                          on_delivery=lambda err, _m: err and errors.append(err))
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(60):
        raise RuntimeError(f"{len(p)} NEXMark records not delivered to {bootstrap}")
    if errors:
        raise RuntimeError(f"NEXMark records not delivered: {errors[:3]}")
    return names
