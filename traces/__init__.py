"""Typed order-aware pipelines: data-trace types (Mamouras et al., "Data-Trace Types for
Distributed Stream Processing Systems", PLDI 2019, §3-5) on the stage layer.

- :mod:`traces.types`: ``U(K, V)``, ``O(K, V)``, markers, events, blocks (:class:`Blocker`);
- :mod:`traces.templates`: ``OpStateless``, ``OpKeyedOrdered``, ``OpKeyedUnordered`` (Table 1, 3);
- :mod:`traces.glue`: HASH, MRG, SORT and the optimistic edge (FlameStream's ``optimistic/``);
- :mod:`traces.dag`: :class:`Dag` (``add_op(op, par, *upstreams)``), the type checker,
  ``run_local`` (the sequential reference) and ``run_parallel`` (the parallel deployment);
- :mod:`traces.compile`: ``compile_dag(dag)``, any DAG (fan-out, fan-in, several sources) as stages
  of :mod:`keygroups` (:mod:`traces.stage`); :mod:`traces.spark`: ``to_spark(dag, df)``, one query.

>>> from dataflow_kafka.traces import Dag, OpStateless, Record, Punctuation
>>> class Double(OpStateless):
...     def on_item(self, key, value, emit):
...         emit(key, 2 * value)
>>> dag = Dag()
>>> src = dag.source("in", period_ms=10, partitions=1)
>>> out = dag.sink("out", dag.add_op(Double(), 2, src))
>>> r = dag.run_local([Record(0, 0, 3, "a", 1), Punctuation(0, 10), Record(0, 1, 12, "a", 5)])
>>> [(e.key, e.value) for e in r.events()]
[('a', 2), ('a', 10)]
"""

from dataflow_kafka.errors import require_module_name

require_module_name(__name__, "dataflow_kafka.traces")  # one name per file: never `import traces`

from dataflow_kafka.traces.dag import Dag, Result, TraceTypeError, canonical
from dataflow_kafka.traces.templates import OpKeyedOrdered, OpKeyedUnordered, OpStateless
from dataflow_kafka.traces.types import Blocker, Event, Marker, O, Punctuation, Record, StreamType, TraceError, U

__all__ = ["Dag", "Result", "canonical", "OpStateless", "OpKeyedOrdered", "OpKeyedUnordered", "U", "O",
           "StreamType", "Marker", "Event", "Record", "Punctuation", "Blocker"]
