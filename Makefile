# Two commands on a fresh machine (Python >= 3.11, Java 17 and Maven on PATH):
#   make demo   set up .venv and Apache Kafka, run the main job on an embedded Kafka broker
#   make test   set up .venv and Apache Kafka, run the whole test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# pyproject.toml and the C extensions' sources: a change to any installs (and builds) again
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml datasource/*.c | cksum | cut -d' ' -f1)

.PHONY: setup demo test test-engines faults conformance bench crash10 chaos clean

KAFKA_STAMP := .jvm/kafka/.resolved-$(shell sha256sum brokers/pom.xml | cut -c1-12)

setup: $(STAMP) $(KAFKA_STAMP)

# Apache Kafka's broker and its dependencies, resolved by Maven from brokers/pom.xml into .jvm/kafka.
$(KAFKA_STAMP): brokers/pom.xml | $(STAMP)
	@command -v mvn >/dev/null || { echo "Maven is required to resolve Apache Kafka (e.g. apt-get install maven)"; exit 1; }
	$(PY) -m dataflow_kafka.brokers

$(STAMP): pyproject.toml $(wildcard datasource/*.c)
	@command -v java >/dev/null || { echo "Java 17 is required by Spark and Kafka (e.g. apt-get install openjdk-17-jre-headless)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench]'
	rm -f $(VENV)/.installed-*
	touch $@

demo: setup
	$(PY) -m demo

# Three pytest-xdist workers on two cores (a third fills the time the others wait on Kafka, Spark's
# scheduler and subprocesses), sharing one broker, each with its own SparkSession; marks, Hypothesis
# profiles, the suite's own checks and measured times: docs/tests.md. The long fault runs are in
# make faults, so the suite stays under 20 minutes.
test: setup
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q -n 3 --dist loadgroup --durations=15 -m "not long_fault"

# The long fault runs, one of each (about 7 min): the driver SIGKILLed mid-run, a Spark worker
# lost under the exactly-once pipeline, a source leader and the sink's transaction coordinator
# killed under it, hard bounces of brokers and the driver with open transactions, a broker
# restarted under a query (docs/reliability.md). make crash10 and make
# chaos run longer versions.
faults: setup
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q -rA -p no:cacheprovider -m long_fault --durations=0

# Engines only, Hypothesis's dev profile: no JVM, no broker (each test checked), under a minute.
test-engines: setup
	HYPOTHESIS_PROFILE=dev $(PY) -m pytest -q -n 2 -m "not spark and not kafka and not jvm"

# Broker conformance against every embedded candidate (docs/brokers.md).
conformance: setup
	@for b in kafka noida-db tansu; do \
	  echo "== $$b"; DATAFLOW_KAFKA_EMBEDDED=$$b $(PY) -m pytest tests/brokers -q -rA -p no:cacheprovider \
	    | grep -E "^(PASSED|FAILED|SKIPPED)|passed|failed"; \
	done

# Spark's JVM Kafka connector and the JVM baselines (benchmarks only): bench/spark_kafka.py
SPARK_KAFKA_SOURCES := bench/spark-kafka/pom.xml $(shell find bench/spark-kafka/java -name '*.java' | LC_ALL=C sort)
SPARK_KAFKA_STAMP := .jvm/spark-kafka/.resolved-$(shell cat $(SPARK_KAFKA_SOURCES) | sha256sum | cut -c1-12)

$(SPARK_KAFKA_STAMP): $(SPARK_KAFKA_SOURCES) | $(STAMP)
	@command -v mvn >/dev/null && command -v javac >/dev/null || { echo "Maven and a JDK (javac) are required for the benchmarks' JVM baselines"; exit 1; }
	$(PY) -m bench.spark_kafka

bench: setup $(SPARK_KAFKA_STAMP)
	$(PY) -m bench.source_throughput
	$(PY) -m bench.source_batch_cost
	$(PY) -m bench.slicer_engine --quick
	$(PY) -m bench.slicer_keys --quick
	$(PY) -m bench.dataflow_engine --quick
	$(PY) -m bench.stages --quick
	$(PY) -m bench.sink_cost --quick
	$(PY) -m bench.connector_cost --quick
	$(PY) -m bench.traces --quick
	$(PY) -m bench.skew --quick

# The crash test with 10 SIGKILLs of the driver (about 11 min; make faults runs 1): docs/reliability.md
crash10: setup
	DFK_CRASH_KILLS=10 $(PY) -m pytest -q -s tests/reliability/test_crash.py

# The long versions of the cluster fault tests (about 40 min; make test and make faults run short ones): Kafka's
# replication test with 5 hard and 5 clean leader bounces, every Kafka fault under the exactly-once
# pipeline, 6 broker and driver bounces with open transactions, 4 Spark worker kills, the demo on the
# clusters, and Spark's StackOverflowError on a stop mid-batch (docs/reliability.md#clusters)
chaos: setup $(SPARK_KAFKA_STAMP)
	DFK_CHAOS=1 DFK_CLUSTER_BOUNCES=5 DFK_LEADER_KILLS=4 DFK_FAULTS=all DFK_TXN_BOUNCES=6 DFK_WORKER_KILLS=4 \
	  $(PY) -m pytest -q -s -rA -p no:cacheprovider -m cluster --durations=0

clean:
	rm -rf $(VENV) .jvm .pytest_cache .hypothesis
