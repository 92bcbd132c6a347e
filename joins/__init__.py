"""Joins of two streams, pure (no Spark): windowed joins and interval joins.

- :class:`WindowJoin` (Flink's window join; Beam's CoGroupByKey per window, then the join type):
  rows of both sides with the same key in the same window (tumbling, sliding, sessions across
  both sides), ``"inner"``, ``"left_outer"``, ``"right_outer"``, ``"full_outer"`` (Spark's
  names), with the Dataflow Model's triggers, allowed lateness and accumulation modes on the
  joined panes (:mod:`joins.window_join`);
- :class:`IntervalJoin` (Flink's interval join; ``a.ts BETWEEN b.ts - x AND b.ts + y``): each
  pair once, when its later row arrives (:mod:`joins.interval_join`).

Input of both engines, per micro-batch: :class:`Row` ``(side, key, ts_ms, value)`` and
:class:`SidePunctuation` ``(side, ts_ms)``; the low watermark is the minimum over both sides. State
is freed when the watermark passes what a row can still join; later rows are dropped and
reported (:class:`JoinDropped`). Design: docs/joins.md.

>>> from dataflow_kafka.joins import IntervalJoin, Row
>>> IntervalJoin.between(0, 5).engine().process([Row("left", 1, 10, "l"), Row("right", 1, 12, "r")]).rows
[Joined(key=1, left=(10, 'l'), right=(12, 'r'))]
"""

from dataflow_kafka.errors import require_module_name

require_module_name(__name__, "dataflow_kafka.joins")  # one name per file: never `import joins`

from dataflow_kafka.joins.cogroup import CoGroup, join_pairs
from dataflow_kafka.joins.interval_join import IntervalJoin, IntervalJoinEngine, IntervalJoinOutput
from dataflow_kafka.joins.spec import LEFT, RIGHT, JoinDropped, JoinError, Joined, JoinType, Pair, SidePunctuation, Row, Side
from dataflow_kafka.joins.window_join import JoinOutput, WindowJoin, WindowJoinEngine, fold

__all__ = ["WindowJoin", "WindowJoinEngine", "JoinOutput", "fold", "IntervalJoin", "IntervalJoinEngine",
           "IntervalJoinOutput", "Joined", "CoGroup", "join_pairs", "JoinType", "Side", "LEFT", "RIGHT",
           "Row", "SidePunctuation", "Pair", "JoinDropped"]
