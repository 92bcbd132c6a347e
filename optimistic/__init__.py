"""FlameStream's optimistic out-of-order processing (Kuralenok et al., "An optimistic approach to
handle out-of-order events within analytical stream processing", §IV-V).

Order-sensitive operators normally wait for a punctuation before they process. Here they do not:
every stage handles items at once, inserts late ones where the total order puts them, and sends
tombstones for outputs that became invalid. A single :class:`Barrier` at the sink waits for
punctuations and releases only valid items, in order.

- :mod:`optimistic.order` -- the total order (:class:`Meta`) and :class:`Item` (section V.A)
- :mod:`optimistic.stages` -- :class:`Map`, :class:`Grouping` (Algorithms 1-2),
  :class:`StatefulMap` (section V.C), state outside them
- :mod:`optimistic.replay` -- :class:`KeyedState`, per-key logs replayed from the insertion point
- :mod:`optimistic.barrier` -- :class:`Barrier` (Algorithm 3) and its counters
- :mod:`optimistic.pipeline`, :mod:`optimistic.buffered` -- the optimistic pipeline and the
  buffered baseline, a micro-batch at a time
- :mod:`optimistic.local` -- :func:`run_local`, :func:`run_buffered`
- :mod:`optimistic.workload` -- the inverted-index workload with Zipf-distributed words

Running inside Spark (what a ``transformWithStateInPandas`` processor should do)
--------------------------------------------------------------------------------
- Stages are frozen dataclasses holding only user functions: ship them to executors pickled.
- An order-sensitive stage is one processor grouped by key group (of ``stage.key(payload)``). Keep
  one value state per key group holding ``KeyedState.to_bytes()``: all keys of the group are
  inside, so a micro-batch costs one read and one write per key group. Per batch:
  ``state = KeyedState.from_bytes(b) if b else stage.open_state()``;
  ``out = stage.process(state, items)`` (items and tombstones of the batch, any order);
  after the batch's punctuation rows give a low watermark ``w`` (min over sources),
  ``stage.collect_garbage(state, w)``; write ``state.to_bytes()`` back.
- The barrier is the only processor that waits. One :class:`Barrier` per key group (any
  partitioning of the last stage's output), stored with ``to_bytes()``;
  ``insert_all(items, now=processing_time_ms)``, then ``punctuate(w, now)`` returns what the
  sink may write, in order within that key group; ``counters`` carries the replay ratio.
- A row form of an item: ``meta.sort_key()`` (binary, sorts as the total order; decode with
  ``Meta.from_sort_key``), the payload (pickled or encoded), and the ``tombstone`` flag.
- Do not drive time with Spark's event-time watermark: it drops the late rows this scheme repairs.

Example
-------
>>> from dataflow_kafka.optimistic import Grouping, run_local
>>> def parity(x): return x % 2
>>> arrivals = [(t, 0, t, t) for t in (3, 1, 2, 4)]      # (event_time_ms, source, offset, payload)
>>> r = run_local([Grouping(window=3, key=parity)], arrivals)
>>> [i.payload for i in r.released], r.tombstones_in
([(1,), (2,), (1, 3), (2, 4)], 1)
"""

from dataflow_kafka.errors import require_module_name

require_module_name(__name__, "dataflow_kafka.optimistic")  # one name per file: never `import optimistic`

from dataflow_kafka.optimistic.barrier import Barrier, BarrierCounters
from dataflow_kafka.optimistic.buffered import BufferedPipeline
from dataflow_kafka.optimistic.local import Mode, RunResult, run_buffered, run_local, safe_punctuations
from dataflow_kafka.optimistic.order import Item, Meta
from dataflow_kafka.optimistic.pipeline import OptimisticPipeline
from dataflow_kafka.optimistic.replay import KeyedState
from dataflow_kafka.optimistic.stages import Grouping, Map, Operation, StatefulMap

__all__ = [
    "Barrier",
    "BarrierCounters",
    "BufferedPipeline",
    "Grouping",
    "Item",
    "KeyedState",
    "Map",
    "Mode",
    "Meta",
    "OptimisticPipeline",
    "RunResult",
    "Operation",
    "StatefulMap",
    "run_buffered",
    "run_local",
    "safe_punctuations",
]
