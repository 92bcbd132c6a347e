"""``python -m dataflow_kafka.brokers``: resolve Apache Kafka's jars with Maven (what ``make setup`` runs)."""

from dataflow_kafka.brokers.apache_kafka import KAFKA_VERSION, resolve_kafka_jars

if __name__ == "__main__":
    print(f"Apache Kafka {KAFKA_VERSION}: {resolve_kafka_jars()}")
