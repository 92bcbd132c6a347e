"""Run by test_cluster.py in its own process: read a topic through a standalone Spark cluster.

Usage: python cluster_job.py MASTER_URL BOOTSTRAP TOPIC CHECKPOINT OUT_JSON
"""

import json
import sys

from dataflow_kafka.datasource.session import spark_session

master, bootstrap, topic, checkpoint, out_path = sys.argv[1:6]
spark = spark_session(master=master, app_name="dataflow-kafka-cluster-test", shuffle_partitions=2,
                      extra={"spark.executor.memory": "1g", "spark.cores.max": "2"})
rows: dict[int, list] = {}


def collect(df, batch_id):
    rows[batch_id] = [[r.kind, r.partition, r.offset, r.value.decode() if r.value else None]
                      for r in df.select("kind", "partition", "offset", "value").collect()]


q = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bootstrap)
     .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "500")
     .load().writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint)
     .trigger(availableNow=True).start())
q.awaitTermination()
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
with open(out_path, "w") as f:
    json.dump({"batches": rows, "executors": executors, "master": spark.sparkContext.master}, f)
spark.stop()
