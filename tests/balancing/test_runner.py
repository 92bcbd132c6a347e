"""The balancer runner: periods of batches, replayed batch ids, and the commands on a real control topic."""

from __future__ import annotations

import json
import pytest

from dataflow_kafka.balancing.controller import ControllerConfig, FluxController
from dataflow_kafka.balancing.runner import BalancerRunner, ControlTopicWriter, encode_command

SKEWED = {0: {0: (300, 30.0), 1: (200, 20.0), 2: (100, 5.0)}, 1: {3: (100, 10.0)}}


def _controller():
    return FluxController({0: 0, 1: 0, 2: 0, 3: 1}, slots=[0, 1],
                          config=ControllerConfig(metric="processor_ms", smoothing=1.0))


def test_a_period_sums_its_batches_and_writes_once():
    written = []
    runner = BalancerRunner(_controller(), written.append, period_batches=2)
    half = {s: {kg: (r / 2, ms / 2) for kg, (r, ms) in g.items()} for s, g in SKEWED.items()}
    assert runner.on_batch(0, half) == []
    cmds = runner.on_batch(1, half)
    # slots 55 / 10 ms: gap 45, key group 1 (20 ms) lowers the variance most (20 * 25 > 30 * 15)
    assert cmds == [{"op": "move", "key_group": 1, "to": 1}]
    assert written == [cmds] and runner.commands == cmds
    assert runner.controller.loads == {0: 30.0, 1: 20.0, 2: 5.0, 3: 10.0}


def test_a_replayed_batch_id_is_not_counted_twice():
    written = []
    runner = BalancerRunner(_controller(), written.append, period_batches=2)
    runner.on_batch(4, SKEWED)
    assert runner.on_batch(4, SKEWED) == [] and runner.on_batch(3, SKEWED) == []
    runner.on_batch(5, {})
    assert runner.controller.loads[0] == 30.0          # batch 4 once, batch 5 empty
    assert len(written) == 1


def test_no_write_without_moves_and_bad_period():
    written = []
    runner = BalancerRunner(_controller(), written.append)
    assert runner.on_batch(0, {0: {0: (1, 1.0)}, 1: {3: (1, 1.0)}}) == []
    assert written == []
    with pytest.raises(ValueError, match="period_batches must be an integer >= 1"):
        BalancerRunner(_controller(), written.append, period_batches=0)


def test_encode_command():
    assert encode_command({"op": "move", "key_group": 17, "to": 3}) == b'{"op":"move","key_group":17,"to":3}'


def test_commands_reach_the_control_topic_in_order(kafka, bootstrap):
    topic = kafka.topic(partitions=1, prefix="control")
    writer = ControlTopicWriter(bootstrap, topic)
    runner = BalancerRunner(FluxController({kg: 0 for kg in range(8)}, slots=[0, 1, 2, 3],
                                           config=ControllerConfig(metric="rows", max_moves=2)),
                            writer, period_batches=1)
    hot = {0: {kg: (100 + kg, 1.0) for kg in range(8)}}
    decided = []
    for batch_id in range(3):
        decided += runner.on_batch(batch_id, hot)
    writer.close()
    assert len(decided) >= 2
    records = kafka.consume_all(topic)
    assert [json.loads(m.value()) for m in records] == decided
    assert [m.partition() for m in records] == [0] * len(decided)


def test_an_undeliverable_command_raises_naming_the_topic():
    writer = ControlTopicWriter("127.0.0.1:1", "no-broker-control", timeout_s=1.0)
    with pytest.raises(RuntimeError, match="control topic 'no-broker-control': 1 of 1 move commands not delivered"):
        writer([{"op": "move", "key_group": 1, "to": 0}])
