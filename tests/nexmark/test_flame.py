"""Where :mod:`bench.nexmark.flame` puts a sample: the innermost frame that names a stage wins."""

from __future__ import annotations

from bench.nexmark.flame import attribute, read_stacks, stage_of

_READ = ("main (pyspark/worker.py:4364)", "_read (datasource/source.py:100)",
         "fetch_range (datasource/kafka_read.py:323)")


def test_a_poll_and_its_columns_are_the_consume_not_the_source_s_other_costs():
    consume = "Kafka consume (librdkafka, a Python object per record)"
    assert stage_of((*_READ, "_poll (datasource/kafka_read.py:392)")) == consume
    assert stage_of((*_READ, "_poll (datasource/kafka_read.py:414)", "RecordColumns.of (datasource/kafka_read.py:440)",
                     "_timestamps (datasource/kafka_read.py:604)")) == consume


def test_decoding_and_the_source_s_own_steps_keep_their_stages():
    assert stage_of((*_READ[:2], "decode (datasource/kafka_read.py:640)",
                     "_event_times_vectorised (datasource/kafka_read.py:496)")).startswith("source decoding")
    decode = (*_READ[:2], "decode (datasource/kafka_read.py:857)", "event_times_and_fields (datasource/kafka_read.py:677)")
    for inner in ("_event_times_pass (datasource/kafka_read.py:704)", "_lines (datasource/kafka_read.py:635)",
                  "_int_fields_in_c (datasource/kafka_read.py:730)"):
        assert stage_of((*decode, inner)).startswith("source decoding"), inner
    assert stage_of(_READ[:2]).startswith("source other")
    assert stage_of((*_READ[:2], "publish (datasource/range_stats.py:60)")).startswith("source other")


def test_a_forked_worker_between_tasks_is_busy_and_the_daemon_waiting_is_idle(tmp_path):
    daemon = 'process 10:"python -m pyspark.daemon pyspark.worker"'
    worker = 'process 11:"python -m pyspark.daemon pyspark.worker"'
    loop = "_run_module_as_main (<frozen runpy>:198);<module> (pyspark/daemon.py:292)"
    f = tmp_path / "stacks.txt"
    f.write_text(f"{daemon};{loop};manager (pyspark/daemon.py:184) 7\n"            # the daemon in select
                 f"{daemon};{worker};{loop};manager (pyspark/daemon.py:275) 5\n"   # a worker's gc.collect()
                 f"{daemon};{worker};{loop};manager (pyspark/daemon.py:264);worker (pyspark/daemon.py:90);"
                 f"main (pyspark/worker.py:4364) 2\n")
    by, idle = attribute(read_stacks(f))
    assert idle == 7
    assert by == {"a worker between tasks (pyspark's daemon: gc.collect)": 5, "pyspark worker, other": 2}
