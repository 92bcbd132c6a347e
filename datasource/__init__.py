"""The ``dataflow-kafka`` Spark data source and sink (Python Data Source API, Spark 4).

>>> from datasource import register                                    # doctest: +SKIP
>>> register(spark)
>>> df = (spark.readStream.format("dataflow-kafka")                    # doctest: +SKIP
...       .option("kafka.bootstrap.servers", "localhost:9092")
...       .option("subscribe", "events").load())
"""

from datasource.lag import consumer_lag
from datasource.options import OptionError
from datasource.schema import KIND_DATA, KIND_ERROR, KIND_MODIFICATION, KIND_PUNCTUATION, PUNCTUATION_HEADER
from datasource.source import DataflowKafkaDataSource

__all__ = ["DataflowKafkaDataSource", "register", "consumer_lag", "OptionError", "KIND_DATA",
           "KIND_PUNCTUATION", "KIND_MODIFICATION", "KIND_ERROR", "PUNCTUATION_HEADER"]


def register(spark) -> None:
    """Make ``format("dataflow-kafka")`` available in ``spark``, and make ``spark`` the active
    session of the calling thread (Spark looks Python data sources up in the thread's active
    session: see :func:`datasource.session.use_in_this_thread`)."""
    from datasource.session import use_in_this_thread

    spark.dataSource.register(DataflowKafkaDataSource)
    use_in_this_thread(spark)
