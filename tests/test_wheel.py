"""The package a user installs: the wheel holds one top-level package, ``dataflow_kafka``
(no ``datasource``, ``bench``, ``tests`` in site-packages), and installed into a fresh virtualenv it
runs the first-pipeline example, locally and on Spark, with nothing but ``import dataflow_kafka``.

The wheel and the fresh virtualenv are the session's (``tests/conftest.py``). The fresh virtualenv gets its dependencies (pyspark, pandas, ...) from this one through a ``.pth``
line, not by installing them again; the editable install of this repository is not visible in
it (a ``.pth`` line adds a folder, it does not run that folder's own ``.pth`` files), and it runs
outside the repository, so ``import tests`` fails there.
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _run(env: Path, code_or_file: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    return subprocess.run([str(env / "bin" / "python"), *code_or_file], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=clean)


def test_the_wheel_installs_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"dataflow_kafka"}, top
    assert "dataflow_kafka/brokers/pom.xml" in names            # Kafka resolves from the installed package
    assert [n for n in names if n.startswith("dataflow_kafka/datasource/_rdcolumns.")]   # the C reader, built
    assert [n for n in names if n.startswith("dataflow_kafka/datasource/_jsonints.")]    # the JSON scan, built
    assert not [n for n in names if "/tests/" in n or n.startswith(("bench/", "demo/"))]


def test_installed_it_imports_alone_and_not_the_test_tree(fresh_env, tmp_path):
    done = _run(fresh_env, ["-c", "import dataflow_kafka as dk, sys; print(dk.__file__); "
                                  "print(sorted(m for m in sys.modules if m.split('.')[0] in "
                                  "('datasource', 'slicer', 'keygroups', 'windowing', 'bench', 'tests')))"], tmp_path)
    assert done.returncode == 0, done.stderr
    where, leaked = done.stdout.splitlines()
    assert str(REPO) not in where and "site-packages" in where, where      # the wheel's copy, not the repo
    assert leaked == "[]"
    for name in ("tests", "bench", "demo", "datasource", "windowing"):
        assert _run(fresh_env, ["-c", f"import {name}"], tmp_path).returncode != 0, f"'import {name}' works"


def test_the_first_pipeline_runs_locally_and_on_spark_from_the_wheel(fresh_env, tmp_path):
    script = tmp_path / "first_pipeline.py"
    script.write_text((REPO / "docs" / "examples" / "first_pipeline.py").read_text())
    done = _run(fresh_env, [str(script)], tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "the local run gives the same: True" in done.stdout, done.stdout[-3000:]
