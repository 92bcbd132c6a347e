"""NEXMark on this project: a seeded generator written to Kafka, queries 0, 1, 2, 5, 7
and 11 written with the public API, each checked against a brute-force reference, and the same
queries in Spark's native API side by side.

* :mod:`bench.nexmark.generator`: NEXMark's event stream (persons, auctions, bids at 1:3:46),
  a share of events delayed, one Kafka topic per event type;
* :mod:`bench.nexmark.queries`: one module per query, :data:`~bench.nexmark.queries.REGISTRY`;
* :mod:`bench.nexmark.query`: what a query gives (variants, reference, Spark-native form);
* :mod:`bench.nexmark.runs`: running a query on Spark (ours and native) and without Spark;
* ``python -m bench.nexmark``: the benchmark ([docs/nexmark.md](../../docs/nexmark.md)).
"""
