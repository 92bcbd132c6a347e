"""The fast Python start of ``datasource.session``: Spark's Python processes run through a wrapper
that drops pip-installed pyspark's byte-code-less ``pyspark.zip`` from ``PYTHONPATH``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from datasource.session import python_without_pyspark_zip

ZIP = Path(pyspark.__file__).resolve().parent / "python" / "lib" / "pyspark.zip"


@pytest.mark.skipif(not ZIP.is_file() or os.name != "posix", reason="pyspark without python/lib/pyspark.zip")
def test_wrapper_drops_only_pysparks_zip_and_runs_this_interpreter(tmp_path):
    wrapper = python_without_pyspark_zip()
    assert wrapper is not None and os.access(wrapper, os.X_OK)
    other = str(tmp_path / "other dir")
    code = "import os, sys, pyspark; print(os.environ['PYTHONPATH']); print(pyspark.__file__); print(sys.prefix)"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ZIP), other]))
    out = subprocess.run([wrapper, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    path, module, prefix = out.splitlines()
    assert path == other                                   # the zip is gone, the rest is kept
    assert Path(module).resolve() == Path(pyspark.__file__).resolve()  # the installed, byte-compiled pyspark
    assert prefix == sys.prefix
    # without the wrapper the zip shadows the installed package
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert "pyspark.zip" in plain.splitlines()[1]
