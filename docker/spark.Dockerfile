# Spark master/worker image with the same pyspark and dataflow-kafka as the driver.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/dataflow-kafka
COPY pyproject.toml README.md ./
COPY datasource datasource
COPY slicer slicer
COPY watermarks watermarks
COPY optimistic optimistic
COPY brokers brokers
COPY keygroups keygroups
COPY demo demo
COPY bench bench
RUN pip install --no-cache-dir -e .
ENV PATH="/usr/local/lib/python3.11/site-packages/pyspark/bin:${PATH}" PYSPARK_PYTHON=python3
