"""Spark's JVM Kafka connector (``format("kafka")``) for the benchmarks' baselines, and the JVM
baseline's own code: resolved and built once into ``.jvm/spark-kafka`` (ignored), never a runtime
dependency of the library. ``make bench`` runs ``python -m bench.spark_kafka``; a second run does
nothing (a stamp per content of the POM and the Java sources).

* ``bench/spark-kafka/pom.xml``: ``spark-sql-kafka-0-10_2.13`` with ``kafka-clients``,
  ``spark-token-provider-kafka-0-10`` and ``commons-pool2``, resolved by Maven
  (``dependency:copy-dependencies``). Our pyspark is 4.3.0; Maven Central serves the connector at
  4.2.0 and 4.1.1, not 4.3.0, so the POM pins :data:`CONNECTOR_VERSION`, the nearest served one.
  It loads and runs in pyspark 4.3.0's JVM (pyspark ships no ``kafka-clients``; the POM leaves out
  every jar pyspark already has: Scala, Hadoop, compression, slf4j).
* ``bench/spark-kafka/java/``: the latency experiment's stages written the way a Spark user writes
  them on the JVM (``NativeMilestones``: ``transformWithState`` with event-time timers), compiled
  with ``javac`` against pyspark's own jars into ``bench-native.jar``.

``connector_jars()`` is None until resolved: benchmarks then skip their JVM baselines with a
message, and tests skip.

    python -m bench.spark_kafka          # resolve and build; prints the jars
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["CONNECTOR_VERSION", "connector_jars", "resolve", "session_extra", "missing_message"]

#: The connector's Spark version (``bench/spark-kafka/pom.xml`` says the same).
CONNECTOR_VERSION = "4.2.0"
ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "bench" / "spark-kafka"
POM = SRC / "pom.xml"
JARS = ROOT / ".jvm" / "spark-kafka"
NATIVE_JAR = "bench-native.jar"


def _sources() -> list[Path]:
    return sorted((SRC / "java").rglob("*.java"))


def _digest() -> str:
    """sha256 of the POM and the Java sources, concatenated in path order (the Makefile's
    ``bench`` target computes the same stamp name)."""
    h = hashlib.sha256(POM.read_bytes())
    for f in _sources():
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _stamp() -> Path:
    return JARS / f".resolved-{_digest()}"


def connector_jars() -> list[str] | None:
    """The resolved jars (connector, its dependencies, ``bench-native.jar``), or None when
    ``python -m bench.spark_kafka`` has not run for the current POM and sources."""
    if not _stamp().exists():
        return None
    return sorted(str(p) for p in JARS.glob("*.jar"))


def session_extra() -> dict[str, str]:
    """``spark_session(extra=...)`` settings that put the jars on Spark's classpath; {} when not
    resolved."""
    jars = connector_jars()
    return {"spark.jars": ",".join(jars)} if jars else {}


def missing_message() -> str:
    return (f"Spark's Kafka connector is not resolved in {JARS}: run 'make bench' or "
            f"'{Path(sys.executable).name} -m bench.spark_kafka' (needs Maven and a JDK)")


def _pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def resolve(quiet: bool = False) -> list[str]:
    """Resolve the connector with Maven and compile the Java baselines, unless the stamp of the
    current POM and sources is there; returns the jars."""
    jars = connector_jars()
    if jars:
        return jars
    for tool in ("mvn", "javac", "jar"):
        if shutil.which(tool) is None:
            raise SystemExit(f"'{tool}' is not on PATH: {missing_message()}")
    if JARS.exists():
        shutil.rmtree(JARS)
    JARS.mkdir(parents=True)
    steps = [["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies", f"-DoutputDirectory={JARS}"]]
    classes = JARS / "classes"
    steps.append(["javac", "--release", "17", "-nowarn", "-cp", f"{_pyspark_jars()}/*", "-d", str(classes),
                  *map(str, _sources())])
    steps.append(["jar", "cf", str(JARS / NATIVE_JAR), "-C", str(classes), "."])
    for cmd in steps:
        if not quiet:
            print(" ".join(cmd[:6]) + (" ..." if len(cmd) > 6 else ""), flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited with {done.returncode}:\n{(done.stdout + done.stderr)[-4000:]}")
    shutil.rmtree(classes)
    if not any(JARS.glob("spark-sql-kafka-0-10_2.13-*.jar")):
        raise SystemExit(f"Maven did not resolve spark-sql-kafka-0-10_2.13 into {JARS}")
    _stamp().touch()
    return connector_jars() or []


if __name__ == "__main__":
    for j in resolve():
        print(j)
