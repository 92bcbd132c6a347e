"""Test support: Kafka helpers and streaming-query helpers shared by the test packages."""

from __future__ import annotations

import os
import time
from pathlib import Path

from dataflow_kafka.brokers.admin import create_topics, unique_topic
from dataflow_kafka.datasource.replay import BatchCollector, offset_log, read_topic, source_batches

__all__ = ["own_broker_kind", "KafkaHelper", "now_ms", "BatchCollector", "run_available_now", "forget_batches_from",
           "build_wheel", "venv_with_wheel",
           "offset_log", "source_batches", "run_source_to_sink"]


def own_broker_kind() -> str:
    """The kind of broker a test starts for itself (to stop, kill or restart it): the embedded
    default, Apache Kafka, unless ``DATAFLOW_KAFKA_EMBEDDED`` picks a development broker."""
    return os.environ.get("DATAFLOW_KAFKA_EMBEDDED") or "kafka"


class KafkaHelper:
    """Topic creation and producing for tests (recent timestamps: retention by record time)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def topic(self, partitions: int = 4, prefix: str = "t") -> str:
        name = unique_topic(prefix)
        create_topics(self.bootstrap, {name: partitions}, timeout_s=15)
        return name

    def produce(self, topic: str, records, **conf) -> None:
        """``records``: iterable of dicts with value, and optional key, partition, timestamp, headers;
        written once each, in order per partition (an idempotent producer: a retry cannot reorder)."""
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "enable.idempotence": True, **conf})
        errors = []
        for r in records:
            kw = {k: r[k] for k in ("key", "partition", "timestamp", "headers") if r.get(k) is not None}
            while True:
                try:
                    p.produce(topic, value=r.get("value"), on_delivery=lambda e, m: e and errors.append(e), **kw)
                    break
                except BufferError:
                    p.poll(0.1)
        assert p.flush(30) == 0
        assert not errors, errors

    def consume_all(self, topic: str) -> list:
        """Every record of ``topic`` from offset 0 to the high watermark."""
        return read_topic(self.bootstrap, topic)


def now_ms() -> int:
    return int(time.time() * 1000)


def run_available_now(spark, options: dict, checkpoint: str, collector: BatchCollector, timeout_s: int = 240):
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (reader.load().writeStream.foreachBatch(collector).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    finished = q.awaitTermination(timeout_s)
    if not finished:
        q.stop()
        raise AssertionError(f"query did not finish within {timeout_s}s")
    if q.exception() is not None:
        raise q.exception()
    return q


def run_source_to_sink(spark, source: dict, sink: dict, checkpoint, timeout_s: float = 180):
    """``format("dataflow-kafka")`` with the ``source`` options, the values of its data rows
    written by the dataflow-kafka sink with the ``sink`` options, under Trigger.AvailableNow.
    Returns (the query or None, its error or None, seconds until it ended); an error of
    ``start()`` itself (the sink checks its access there) is returned too."""
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in source.items():
        reader = reader.option(k, v)
    began, q = time.monotonic(), None
    try:
        writer = (reader.load().filter("kind = 'data'").selectExpr("value").writeStream.format("dataflow-kafka")
                  .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
        for k, v in sink.items():
            writer = writer.option(k, v)
        q = writer.start()
        q.awaitTermination(timeout_s)
        error = q.exception()
    except Exception as e:  # noqa: BLE001 - start() may refuse
        error = e
    finally:
        if q is not None:
            q.stop()
    return q, error, time.monotonic() - began


def forget_batches_from(checkpoint: str, batch_id: int) -> None:
    """Simulate a crash during ``batch_id``: drop its commit and every later offset and commit."""
    root = Path(checkpoint)
    for sub in ("commits", "offsets"):
        for f in (root / sub).iterdir():
            if f.name.isdigit() and (int(f.name) > batch_id or (sub == "commits" and int(f.name) >= batch_id)):
                f.unlink()
        for f in (root / sub).glob(".*.crc"):
            f.unlink()


def build_wheel(out: Path) -> Path:
    """The package's wheel, built from this repository into ``out``."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(repo)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("dataflow_kafka-*.whl")
    return built


def venv_with_wheel(wheel: Path, env: Path) -> Path:
    """A fresh virtualenv in ``env`` with ``wheel`` installed; its dependencies (pyspark, pandas,
    ...) come from this environment through a ``.pth`` line, not installed again. The editable
    install of this repository is not visible in it (a ``.pth`` line adds a folder, it does not
    run that folder's own ``.pth`` files)."""
    import site
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
    purelib = subprocess.run([str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "dependencies-of-the-test-venv.pth").write_text(
        "\n".join(p for p in site.getsitepackages() if Path(p).is_dir()) + "\n")
    done = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return env


def python_worker_sockets(spark) -> dict:
    """What a Python worker of ``spark``'s executors sees: whether Spark told its daemon to use Unix
    domain sockets (``uds``, the daemon's environment) and the address families of the worker's
    open sockets (``families``; its connection to the executor is one of them)."""
    def probe(batches):
        import os
        import socket

        import pyarrow as pa

        kinds = set()   # every open socket of the process, read from its descriptors (a frozen heap
        for fd in os.listdir("/proc/self/fd"):   # hides its objects from gc.get_objects)
            try:
                if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                    continue
                with socket.socket(fileno=os.dup(int(fd))) as s:
                    kinds.add(s.family.name)
            except OSError:
                continue
        kinds = sorted(kinds)
        for b in batches:
            yield pa.RecordBatch.from_pydict({"uds": [os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "")] * b.num_rows,
                                              "families": [",".join(kinds)] * b.num_rows})

    row = spark.range(1).mapInArrow(probe, "uds string, families string").collect()[0]
    return {"uds": row.uds.lower() == "true", "families": row.families.split(",")}
