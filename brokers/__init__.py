"""Kafka bootstrap addresses for jobs and tests: external, Docker, or embedded (see launcher)."""

from brokers.launcher import EMBEDDED_KINDS, Broker, BrokerError, kafka_broker, wait_until_healthy

__all__ = ["Broker", "BrokerError", "EMBEDDED_KINDS", "kafka_broker", "wait_until_healthy"]
