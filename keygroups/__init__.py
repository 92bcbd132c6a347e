"""Key groups and the stage layer: routing, punctuations, the row contract, stages, pipelines.

Key groups (Enorm §4-5) are the unit of state and of load balancing: many keys share one group,
each processor call handles a whole group (vectorised), per-key state lives inside the group's
state. This package is the one home of what every engine's Spark operator shares:

- :mod:`keygroups.routing`: the one routing function, key -> key group (Spark's ``xxhash64``, in
  the JVM with :func:`with_key_groups` or in Python with :func:`key_group_of`), and the one marker
  fan-out (punctuation and modification rows to every key group; data-trace types §4);
- :mod:`keygroups.punctuation`: :class:`PunctuationTracker`, a low watermark as the minimum over
  senders' punctuations (Enorm §6.2), and :class:`InputWatermarks`, one per input of a stage
  with several inputs;
- :mod:`keygroups.contract`: the inter-stage row contract (data, punctuation, modification,
  error, dropped and metrics rows);
- :mod:`keygroups.stage`: the stage protocol, :class:`~keygroups.stage.StageLogic` (the hooks an
  engine adapter implements once; routing as one value: key columns or a :class:`PythonRouter`)
  and the values a stage takes and returns; it imports only the row contract;
  :mod:`keygroups.examples`: a worked example stage;
- :mod:`keygroups.pipeline`: :class:`Stage` (the hooks, composable: ``stage_a.then(stage_b)``)
  and :class:`Pipeline` (``Pipeline.join(stage, left=..., right=...)``, the Spark plan and a
  local runner), a facade over :mod:`keygroups.plan` (links, names, types, the fusion rule, the
  operators' specs), :mod:`keygroups.spark_steps` (a chain's Spark plan),
  :mod:`keygroups.frames` (a chain's local steps in pandas) and :mod:`keygroups.dag` (a query of
  several pipelines);
- :mod:`keygroups.operator` / :mod:`keygroups.processor`: a stage operator (fused stages of one
  key group) as pure logic and as a ``transformWithStateInPandas`` processor;
- :mod:`keygroups.fan_in`: stages with several inputs (:class:`Input`): inputs tagged, unioned
  and routed by the one routing function, a watermark per input;
- :mod:`keygroups.computed`: :class:`Computed` stage inputs (a Python function of the upstream
  rows) that Spark and the local runner evaluate alike;
- :mod:`keygroups.packed`: a task's rows of a key group as one Arrow blob before the shuffle.

Modules reach each other through public names only (each module's ``__all__``).

Routing by slot (key groups that move between shuffle partitions, Enorm §4.4.2) is built on this
layer in :mod:`balancing.slots`.

>>> from dataflow_kafka.keygroups import key_group_of
>>> key_group_of("user-17", 8) in range(8)
True
"""

from __future__ import annotations

from dataflow_kafka.errors import require_module_name

require_module_name(__name__, "dataflow_kafka.keygroups")  # one name per file: never `import keygroups`

from dataflow_kafka.keygroups.computed import Computed, fanout, json_field, json_object
from dataflow_kafka.keygroups.contract import CONTROL_COLUMNS, Modification
from dataflow_kafka.keygroups.pipeline import Pipeline, Stage
from dataflow_kafka.keygroups.punctuation import InputWatermarks, PunctuationTracker
from dataflow_kafka.keygroups.routing import KEY_GROUP_COLUMN, hash_key, key_group_of, key_groups_of, with_key_groups
from dataflow_kafka.keygroups.stage import Dropped, Input, PythonRouter, StageInput, StageOutput

__all__ = [
    "KEY_GROUP_COLUMN", "with_key_groups", "key_group_of", "key_groups_of", "hash_key",
    "PunctuationTracker", "InputWatermarks", "CONTROL_COLUMNS", "Modification",
    "Stage", "StageInput", "StageOutput", "Dropped", "Input", "PythonRouter", "Pipeline", "Computed", "json_field",
    "json_object", "fanout",
    "StageProcessor", "deferred",
]


def __getattr__(name: str):
    # The Spark processors import pyspark: loaded on first use, so the engines' local runs
    # (keygroups.Pipeline.run_local) do not need it.
    if name in ("StageProcessor", "deferred"):
        from dataflow_kafka.keygroups import processor

        return getattr(processor, name)
    raise AttributeError(f"module 'keygroups' has no attribute {name!r}")
