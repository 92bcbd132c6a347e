"""Which Kafka errors a read or an offset request rides out (retries until its deadline) and which
fail at once: the codes of Kafka's Java client's retriable family that a leader change or a
restarting broker produces, against the ones retrying cannot mend (a denied ACL, a bad login)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from dataflow_kafka.datasource.kafka_read import _transient

RIDDEN_OUT = ["OFFSET_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE", "FENCED_LEADER_EPOCH",
              "UNKNOWN_LEADER_EPOCH", "NOT_ENOUGH_REPLICAS", "KAFKA_STORAGE_ERROR", "NOT_COORDINATOR",
              "COORDINATOR_LOAD_IN_PROGRESS", "REQUEST_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN",
              "_UNKNOWN_PARTITION"]
FAIL_AT_ONCE = ["TOPIC_AUTHORIZATION_FAILED", "SASL_AUTHENTICATION_FAILED", "_SSL", "_AUTHENTICATION",
                "INVALID_REPLICATION_FACTOR", "OFFSET_OUT_OF_RANGE"]


@pytest.mark.parametrize("name", RIDDEN_OUT)
def test_leader_changes_and_restarts_are_ridden_out(name):
    assert _transient(KafkaError(getattr(KafkaError, name)))


@pytest.mark.parametrize("name", FAIL_AT_ONCE)
def test_mistakes_retrying_cannot_mend_fail_at_once(name):
    assert not _transient(KafkaError(getattr(KafkaError, name)))
