"""Kafka bootstrap addresses for jobs and tests: an external cluster or an embedded broker
(Apache Kafka by default; see :mod:`brokers.launcher`), or a replicated embedded cluster whose
nodes a test can hurt (:mod:`brokers.cluster`)."""

from dataflow_kafka.errors import require_module_name

require_module_name(__name__, "dataflow_kafka.brokers")  # one name per file: never `import brokers`

from dataflow_kafka.brokers.apache_kafka import KAFKA_VERSION, KafkaSetupError, resolve_kafka_jars
from dataflow_kafka.brokers.cluster import ClusterNode, KafkaCluster, kafka_cluster
from dataflow_kafka.brokers.launcher import EMBEDDED_KINDS, Broker, BrokerError, Scram, kafka_broker, wait_until_healthy
from dataflow_kafka.brokers.tls import Tls, TlsListener

__all__ = ["Broker", "ClusterNode", "EMBEDDED_KINDS", "KAFKA_VERSION", "KafkaCluster", "Scram", "Tls", "TlsListener",
           "kafka_broker", "kafka_cluster", "resolve_kafka_jars", "wait_until_healthy"]
