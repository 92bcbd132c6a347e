"""The ``dataflow-kafka`` Spark data source and sink (Python Data Source API, Spark 4).

>>> from dataflow_kafka.datasource import register                                    # doctest: +SKIP
>>> register(spark)
>>> df = (spark.readStream.format("dataflow-kafka")                    # doctest: +SKIP
...       .option("kafka.bootstrap.servers", "localhost:9092")
...       .option("subscribe", "events").load())
"""

from dataflow_kafka.errors import require_module_name

require_module_name(__name__, "dataflow_kafka.datasource")  # one name per file: never `import datasource`

from dataflow_kafka.datasource.lag import consumer_lag
from dataflow_kafka.datasource.options import OptionError
from dataflow_kafka.datasource.schema import KIND_DATA, KIND_ERROR, KIND_MODIFICATION, KIND_PUNCTUATION, PUNCTUATION_HEADER
from dataflow_kafka.datasource.session import register
from dataflow_kafka.datasource.source import DataflowKafkaDataSource

__all__ = ["DataflowKafkaDataSource", "register", "consumer_lag", "KIND_DATA", "KIND_PUNCTUATION",
           "KIND_MODIFICATION", "KIND_ERROR", "PUNCTUATION_HEADER"]

