"""Runnable examples of typed pipelines: ``python -m dataflow_kafka.traces.examples.iot`` (the paper's
IoT pipeline), ``.yahoo`` (the Yahoo streaming benchmark), ``.loads`` (Figure 5, fan-out and fan-in)."""
