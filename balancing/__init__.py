"""Enorm on Spark: key groups that move between slots at runtime, and the balancer that moves them.

- :mod:`balancing.routing_table`: key group -> slot, versioned by move commands (modification
  punctuations); slots placed on chosen shuffle partitions with Spark's hash;
- :mod:`balancing.slots`: routing by slot, as stages: :class:`~balancing.slots.SlotRouter` holds
  the table in its state and applies move commands at the batch start, a
  :class:`~balancing.slots.SlotStage` after it is grouped by slot;
- :mod:`balancing.compute` / :mod:`balancing.consolidate`: windowed aggregation split into
  partials per (slot, key, pane) and their merge per key (instant migration, Enorm §4.5);
- :mod:`balancing.migration`: the router -> compute -> consolidate pipeline, load per slot and
  key group from the metrics rows;
- :mod:`balancing.migration_disruptive`: a keyed ordered operator whose key groups move with
  their state (shipped through a hand-off topic, rows held for one batch).
"""

from dataflow_kafka.errors import require_module_name

require_module_name(__name__, "dataflow_kafka.balancing")  # one name per file: never `import balancing`
