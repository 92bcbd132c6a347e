"""The suite's own machinery (tests/suite.py): each subpackage has one module name, a run that
loads a file as two modules fails, marks come from fixtures, a test without the ``spark`` and
``kafka`` marks that starts Java fails, and Hypothesis's examples scale with the profile.

The runs of pytest below are subprocesses on files written to a temporary folder, with the plugin
loaded by ``-p tests.suite``; "java" there is a shell script of that name (no JVM starts), except
in the one test marked ``spark``, which starts a real JVM one process further down.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from hypothesis import settings

from tests.suite import examples, modules_loaded_twice, starts_a_jvm_or_broker

ROOT = Path(__file__).resolve().parents[1]


def _subpackage_folders() -> dict[str, str]:
    """``{folder: installed name}`` from pyproject.toml's package-dir (the root package aside)."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {folder: name for name, folder in package_dir.items() if name != "dataflow_kafka"}


def test_each_subpackage_refuses_its_folder_name_and_loads_under_its_own():
    folders = _subpackage_folders()
    assert len(folders) >= 11, folders
    script = textwrap.dedent("""
        import importlib, json, sys
        out = {}
        for folder, name in json.loads(sys.argv[1]).items():
            try:
                importlib.import_module(folder)
                out[folder] = "imported"
            except ImportError as e:
                out[folder] = [type(e).__name__, getattr(e, "condition", None), str(e), folder in sys.modules]
            importlib.import_module(name)
        print(json.dumps(out))
    """)
    import json

    # the repository root on sys.path (python -c puts the working directory first), as in any run
    done = subprocess.run([sys.executable, "-c", script, json.dumps(folders)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for folder, (kind, condition, message, left_in_modules) in json.loads(done.stdout).items():
        assert (kind, condition, left_in_modules) == ("ModuleNameError", "WRONG_MODULE_NAME", False), folder
        assert f"import {folders[folder]}" in message, message


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_modules_loaded_twice_finds_a_file_under_two_names_and_not_an_alias(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("class A:\n    pass\n")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.py"
    outside.write_text("")
    one, two = _load(tmp_path / "pkg" / "mod.py", "mod"), _load(tmp_path / "pkg" / "mod.py", "pkg.mod")
    assert one.A is not two.A                                         # what two names cost
    assert modules_loaded_twice({"mod": one, "pkg.mod": two}, tmp_path) == {"pkg/mod.py": ["mod", "pkg.mod"]}
    assert modules_loaded_twice({"mod": one, "alias": one}, tmp_path) == {}
    assert modules_loaded_twice({"a": _load(outside, "a"), "b": _load(outside, "b")}, tmp_path) == {}
    outside.unlink()


def _pytest(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """pytest with this suite's plugin on the files in ``tmp_path`` (its own rootdir)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    spark\n    kafka\n")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.suite", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"), "-q", *args, str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=180, env=env)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist-workers"])
def test_a_run_that_loads_a_file_as_two_modules_fails_naming_the_file(tmp_path, workers):
    (tmp_path / "helper.py").write_text("X = 1\n")
    (tmp_path / "test_twice.py").write_text(textwrap.dedent("""
        import importlib.util, sys
        from pathlib import Path

        def load(name):
            spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("helper.py"))
            sys.modules[name] = module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)

        def test_loads_the_helper():
            load("helper_a")
            if "TWICE" in __import__("os").environ:
                load("helper_b")
    """))
    once = _pytest(tmp_path, *workers)
    assert once.returncode == 0, once.stdout + once.stderr
    twice = _pytest(tmp_path, *workers, env={**os.environ, "TWICE": "1"})
    assert twice.returncode == 1, twice.stdout + twice.stderr
    assert "1 passed" in twice.stdout and "helper.py: helper_a, helper_b" in twice.stdout, twice.stdout


def test_starts_a_jvm_or_broker_reads_the_launcher():
    assert starts_a_jvm_or_broker(["/usr/lib/jvm/java-17/bin/java", "-version"])
    assert starts_a_jvm_or_broker(["/x/pyspark/bin/spark-submit", "pyspark-shell"])
    assert starts_a_jvm_or_broker("noida-db start --only kafka")
    assert not starts_a_jvm_or_broker([sys.executable, "-c", "print('java')"])
    assert not starts_a_jvm_or_broker([])


def test_marks_come_from_fixtures_and_an_unmarked_test_that_starts_java_fails(tmp_path):
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\nexit 0\n")
    java.chmod(0o755)
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.fixture(scope="session")
        def broker():
            yield "127.0.0.1:1"

        @pytest.fixture
        def cluster(broker):        # depends on a fixture of FIXTURE_MARKS: its tests are kafka tests too
            return broker
    """))
    (tmp_path / "test_java.py").write_text(textwrap.dedent(f"""
        import subprocess
        import pytest

        JAVA = {str(java)!r}

        def test_unmarked_starts_java():
            subprocess.run([JAVA, "-version"], check=True)

        @pytest.mark.spark
        def test_marked_by_hand_starts_java():
            subprocess.run([JAVA, "-version"], check=True)

        def test_through_a_fixture_starts_java(cluster):
            subprocess.run([JAVA, "-version"], check=True)

        def test_unmarked_starts_something_else():
            subprocess.run(["true"], check=True)
    """))
    done = _pytest(tmp_path, "-rE")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "4 passed, 1 error" in done.stdout, done.stdout
    assert "ERROR at teardown of test_unmarked_starts_java" in done.stdout, done.stdout
    assert f"has no 'spark' or 'kafka' mark but started: {java} -version" in done.stdout, done.stdout
    engines = _pytest(tmp_path, "--collect-only", "-m", "not spark and not kafka")
    assert "2/4 tests collected (2 deselected)" in engines.stdout, engines.stdout
    assert "test_through_a_fixture" not in engines.stdout


@pytest.mark.spark     # starts a real JVM (java -version), two processes below this one
def test_a_jvm_started_below_an_unmarked_test_fails_it(tmp_path):
    (tmp_path / "test_grandchild.py").write_text(textwrap.dedent("""
        import subprocess, sys

        def test_a_python_child_starts_java():
            code = "import subprocess; subprocess.run(['java', '-version'], check=True)"
            subprocess.run([sys.executable, "-c", code], check=True)
    """))
    done = _pytest(tmp_path, "-rE")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "but started: a JVM (pid " in done.stdout, done.stdout


def test_examples_scale_with_the_profile():
    ci, dev = settings.get_profile("ci"), settings.get_profile("dev")
    assert [examples(n, ci) for n in (300, 8, 1)] == [300, 8, 1]
    assert [examples(n, dev) for n in (300, 8, 1)] == [30, 1, 1]


def test_loadgroup_tags_are_checked():
    """A test in an xdist group whose node id lacks ``@<group>`` is reported (pytest-xdist 3.8 on
    pytest 9.2 loses the tag, and each worker then starts the group's fixture itself)."""
    from types import SimpleNamespace

    from tests.suite import ungrouped

    def item(nodeid, group):
        return SimpleNamespace(nodeid=nodeid, get_closest_marker=lambda name: object() if group else None)

    assert ungrouped([item("t.py::a@kafka-cluster", True), item("t.py::b", False)]) == []
    assert ungrouped([item("t.py::a", True), item("t.py::b", False)]) == ["t.py::a"]


def test_tests_sharing_a_module_fixture_run_on_one_worker_which_sets_it_up_once(tmp_path):
    """Under ``--dist loadgroup`` a module-scoped fixture's tests share a group (``scoped_group``),
    so two workers set it up once, not once each; a test without one stays ungrouped."""
    setups = tmp_path / "setups.txt"
    (tmp_path / "test_shared.py").write_text(textwrap.dedent(f"""
        import os
        import pytest

        @pytest.fixture(scope="module")
        def costly():
            with open({str(setups)!r}, "a") as f:
                f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
            return 1

        @pytest.mark.parametrize("i", range(8))
        def test_uses_it(costly, i):
            assert costly == 1

        @pytest.mark.parametrize("i", range(8))
        def test_alone(i):
            pass
    """))
    done = _pytest(tmp_path, "-n", "2", "--dist", "loadgroup", "-vv")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "16 passed" in done.stdout, done.stdout
    assert len(setups.read_text().split()) == 1, (setups.read_text(), done.stdout)
    assert "test_uses_it[0]@scoped:test_shared.py" in done.stdout, done.stdout
    assert "test_alone[0]@" not in done.stdout, done.stdout


def test_the_suite_s_jvms_compile_with_c1_only_unless_a_tier_is_set(spark):
    from tests.suite import SUITE_JVM_OPTIONS, use_quick_jit

    args = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert SUITE_JVM_OPTIONS in args, args
    env = {"JDK_JAVA_OPTIONS": "-Xss4m"}
    use_quick_jit(env)
    assert env["JDK_JAVA_OPTIONS"] == f"-Xss4m {SUITE_JVM_OPTIONS}"
    own = {"JDK_JAVA_OPTIONS": "-XX:TieredStopAtLevel=4"}
    use_quick_jit(own)
    assert own["JDK_JAVA_OPTIONS"] == "-XX:TieredStopAtLevel=4"
