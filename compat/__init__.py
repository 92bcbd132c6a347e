"""Other systems' names for dataflow-kafka's concepts, for people porting code.

dataflow-kafka has one name per concept (docs/ARCHITECTURE.md, "Vocabulary"); the names of the
systems it follows live here, each module the vocabulary of one system, each name the same object
as (or a constructor of) the canonical one:

* :mod:`dataflow_kafka.compat.beam`: Apache Beam's window and combiner names (``FixedWindows``,
  ``SumCombiner``, ``CombineFn``, ...); Beam's trigger names are the canonical ones;
* :mod:`dataflow_kafka.compat.dataflow_model`: the Dataflow Model paper's trigger names
  (``AtWatermark``, ``SequenceOf``, ``RepeatUntil``, ...);
* :mod:`dataflow_kafka.compat.scotty`: Scotty's ``WindowMeasure`` and measure-first window
  constructors (``TumblingWindow(WindowMeasure.Time, 5_000)``).

Importing these names from their old places (``dataflow_kafka.windowing``,
``dataflow_kafka.watermarks``, the root) still works, with a ``DeprecationWarning``.
"""

from dataflow_kafka.errors import require_module_name

require_module_name(__name__, "dataflow_kafka.compat")  # one name per file: never `import compat`

__all__: list[str] = []
