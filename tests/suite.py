"""How the suite sorts and checks itself: a pytest plugin, loaded by tests/conftest.py.

- **Marks from fixtures.** A test that uses a fixture of :data:`FIXTURE_MARKS` (directly or through
  another fixture: pytest's fixture closure) gets that fixture's mark, ``spark`` or ``kafka``;
  ``-m "not spark and not kafka"`` (``make test-engines``) is what is left. Marks a fixture cannot
  show (a test that starts its own Spark or broker in a subprocess) are set by hand.
- **Groups from fixtures.** Under ``--dist loadgroup`` a test whose closure holds a costly session
  fixture of :data:`FIXTURE_GROUPS` (a Kafka cluster, the wheel) or any class-, module- or
  package-scoped fixture (:func:`scoped_group`) runs on the worker that holds that fixture's other
  tests, so each is set up once per run, not once per worker.
- **Hypothesis profiles.** ``HYPOTHESIS_PROFILE=ci`` (the default; ``make test``) runs the
  examples each test asks for; ``dev`` (``make test-engines``) a tenth of them. A test asks through
  :func:`examples`, which scales its number by the loaded profile.
- **No JVM in an unmarked test.** While a test without the ``spark``, ``kafka`` or ``jvm`` marks runs, a
  process it starts that is Java, Spark's launcher or a broker (seen by a Python audit hook), or
  any JVM started below it (each JVM writes a log file named by ``JAVA_TOOL_OPTIONS`` into a
  folder the guard reads), fails the test: the engines selection starts no JVM and no broker.
- **Quick JIT for the suite's JVMs.** Every JVM the suite starts (its Spark sessions, brokers,
  clusters, launchers) compiles with C1 only (``-XX:TieredStopAtLevel=1`` in ``JDK_JAVA_OPTIONS``,
  unless that already names a tier): they live seconds to minutes, and in a fresh Spark JVM here
  the two compilers took about half its CPU, C2 most of it (docs/tests.md, "Marks").
  Benchmarks do not load this plugin: they run Spark's JVMs as a user does.
- **One name per file.** At the end of the session no file of the repository may be loaded as two
  modules (``slicer/stage.py`` as ``slicer.stage`` and ``dataflow_kafka.slicer.stage``: two
  classes of one name, ``isinstance`` failing without a word); such a run fails. Under
  ``pytest-xdist`` each worker reports its own modules to the controller.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import settings

__all__ = ["FIXTURE_MARKS", "FIXTURE_GROUPS", "SHARED_SCOPES", "scoped_group", "ungrouped", "PROFILES", "examples", "derive_marks", "modules_loaded_twice", "starts_a_jvm_or_broker",
           "JvmGuard"]

#: fixture -> the mark of every test whose fixture closure contains it. ``spark`` needs ``broker``
#: (the session's Spark stops first), so a Spark test is also a ``kafka`` test.
FIXTURE_MARKS: dict[str, str] = {
    "spark": "spark",                   # the session's SparkSession (tests/conftest.py)
    "broker": "kafka",                  # the session's broker; ``bootstrap`` and ``kafka`` depend on it
    "own_broker": "kafka",              # a broker of the test's own, to stop, kill or restart (tests/conftest.py)
    "secured": "kafka",                 # a SCRAM-secured Apache Kafka of its own (datasource/test_security.py)
    "standalone_cluster": "spark",      # a standalone Spark master and worker (datasource/test_cluster.py)
    "tls_broker": "kafka",              # a broker with every TLS listener (datasource/test_tls.py)
    "connect_url": "spark",             # a Spark Connect server (datasource/test_connect.py)
    "_kafka_cluster": "kafka",          # the session's three-node Kafka cluster; ``kafka_cluster`` depends on it
}

#: Marks of tests that may start a JVM: the derived ones, and ``jvm`` (a JDK tool such as keytool,
#: set by hand; ``make test-engines`` leaves them out).
JVM_MARKS = ("spark", "kafka", "jvm")

#: Hypothesis profiles: ``ci`` is Hypothesis's defaults (100 examples unless a test asks for more
#: or fewer), ``dev`` a tenth of every test's examples.
PROFILES: dict[str, dict] = {"ci": {}, "dev": {"max_examples": 10}}
for _name, _kwargs in PROFILES.items():
    settings.register_profile(_name, **_kwargs)


def examples(n: int, profile: settings | None = None) -> int:
    """``n`` examples under the ``ci`` profile, scaled by ``profile``'s ``max_examples`` (the loaded
    profile's by default: a tenth under ``dev``, at least 1). A test module calls it when it is
    imported, after this plugin loaded the profile."""
    return max(1, n * (profile or settings.default).max_examples // 100)


#: fixture -> the pytest-xdist group of every test whose closure contains it: ``--dist loadgroup``
#: runs a group on one worker, so a session-scoped fixture that costs much is started once, not
#: once per worker
FIXTURE_GROUPS: dict[str, str] = {
    "_kafka_cluster": "kafka-cluster",  # three Kafka nodes, about 1 GiB (tests/conftest.py)
    "wheel": "wheel",                   # the package's wheel built, and a virtualenv with it (tests/conftest.py)
}


#: fixture scopes wider than a test and narrower than the session: such a fixture is set up once
#: per worker that runs one of its tests, so its tests share an xdist group (:func:`scoped_group`)
SHARED_SCOPES = ("class", "module", "package")


def scoped_group(item) -> str | None:
    """The xdist group of a test whose closure holds a class-, module- or package-scoped fixture:
    ``scoped:<where the first such fixture is defined>``, so ``--dist loadgroup`` runs every test
    that shares it on one worker and the fixture (a Spark query of a minute, a Spark cluster) is set
    up once, not once per worker (tests/test_suite.py). None for any other test."""
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for fixturedef in (info.name2fixturedefs.get(name, ()) if info is not None else ()):
            if fixturedef.scope in SHARED_SCOPES:
                return f"scoped:{fixturedef.baseid or '.'}"
    return None


def derive_marks(items) -> None:
    """Add to each item the marks of the fixtures in its closure (:data:`FIXTURE_MARKS`) and its
    xdist group: that of :data:`FIXTURE_GROUPS`, else :func:`scoped_group`'s."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for mark in sorted({m for f, m in FIXTURE_MARKS.items() if f in names}):
            if item.get_closest_marker(mark) is None:
                item.add_marker(getattr(pytest.mark, mark))
        if item.get_closest_marker("xdist_group") is not None:
            continue
        groups = sorted({g for f, g in FIXTURE_GROUPS.items() if f in names})
        group = groups[0] if groups else scoped_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def modules_loaded_twice(modules: Mapping[str, object], root: Path) -> dict[str, list[str]]:
    """``{file: [module names]}`` for every file under ``root`` that ``modules`` (``sys.modules``)
    holds as two or more module objects (an alias, one module under two names, as pyspark keeps
    ``pyspark.rdd`` for ``pyspark.core.rdd``, loads nothing twice)."""
    loaded: dict[str, dict[int, str]] = {}
    root = root.resolve()
    for name, module in list(modules.items()):
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        if path.is_relative_to(root):
            loaded.setdefault(str(path.relative_to(root)), {}).setdefault(id(module), name)
    return {f: sorted(by_id.values()) for f, by_id in sorted(loaded.items()) if len(by_id) > 1}


#: what a test that needs no JVM and no broker must not start (the launcher's file name)
_FORBIDDEN = ("java", "spark-submit", "spark-class", "noida-db", "tansu", "kafka-server-start.sh")
_SPAWN_EVENTS = ("subprocess.Popen", "os.posix_spawn", "os.exec")   # args: (executable, argv, ...)


def starts_a_jvm_or_broker(argv) -> bool:
    """Whether a command line (a list, or a string as ``shell=True`` takes it) starts Java, Spark's
    launcher (``spark-submit``, ``spark-class``) or a broker."""
    if isinstance(argv, (str, bytes)):
        argv = os.fsdecode(argv).split()
    argv = list(argv or ())
    return bool(argv) and os.path.basename(os.fsdecode(argv[0])) in _FORBIDDEN


class JvmGuard:
    """Records what a test starts that :func:`starts_a_jvm_or_broker` (through Python's audit events
    for ``subprocess.Popen``, ``os.posix_spawn`` and ``os.exec``), and every JVM started anywhere
    below it (each writes a log file named in ``JAVA_TOOL_OPTIONS`` into :attr:`folder`)."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="dfk-jvm-guard-"))
        self.active = False
        self.started: list[str] = []
        self._saved: str | None = None
        sys.addaudithook(self._audit)          # for the process's life: inactive outside a guarded test

    def _audit(self, event: str, args: tuple) -> None:
        if self.active and event in _SPAWN_EVENTS:
            executable, argv = args[0], args[1]
            if starts_a_jvm_or_broker(argv) or (executable is not None and starts_a_jvm_or_broker([executable])):
                command = argv if isinstance(argv, (str, bytes)) else " ".join(os.fsdecode(a) for a in argv)
                self.started.append(os.fsdecode(command)[:300])

    def begin(self) -> None:
        for f in self.folder.iterdir():
            f.unlink()
        self.started = []
        self._saved = os.environ.get("JAVA_TOOL_OPTIONS")
        own = f"-Xlog:gc:file={self.folder}/jvm-%p.log"
        os.environ["JAVA_TOOL_OPTIONS"] = f"{self._saved} {own}" if self._saved else own
        self.active = True

    def end(self) -> list[str]:
        """Stop watching; what was started since :meth:`begin`: command lines, then the JVMs."""
        self.active = False
        if self._saved is None:
            os.environ.pop("JAVA_TOOL_OPTIONS", None)
        else:
            os.environ["JAVA_TOOL_OPTIONS"] = self._saved
        pids = sorted(f.name.removeprefix("jvm-").removesuffix(".log") for f in self.folder.iterdir())
        return self.started + [f"a JVM (pid {pid})" for pid in pids]


# -- the plugin's hooks -------------------------------------------------------------------------

_guard: JvmGuard | None = None
_TWICE_KEY = "modules_loaded_twice"


#: Added to ``JDK_JAVA_OPTIONS`` for every JVM below the suite (module docstring).
SUITE_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


def use_quick_jit(env: dict | None = None) -> None:
    """Add :data:`SUITE_JVM_OPTIONS` to ``JDK_JAVA_OPTIONS`` in ``env`` (this process's
    environment by default, which every JVM started below it inherits), unless a tier is set."""
    env = os.environ if env is None else env
    current = env.get("JDK_JAVA_OPTIONS", "")
    if "TieredStopAtLevel" not in current:
        env["JDK_JAVA_OPTIONS"] = f"{current} {SUITE_JVM_OPTIONS}".strip()


def pytest_configure(config) -> None:
    global _guard
    use_quick_jit()
    settings.load_profile(config.getoption("--hypothesis-profile", None) or os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    if _guard is None:
        _guard = JvmGuard()
    config._modules_loaded_twice = {}


def pytest_unconfigure(config) -> None:
    if _guard is not None:
        shutil.rmtree(_guard.folder, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)                # before ``-m`` deselects
def pytest_collection_modifyitems(items) -> None:
    derive_marks(items)


def ungrouped(items) -> list[str]:
    """Node ids of ``items`` with an ``xdist_group`` mark that pytest-xdist's ``loadgroup`` did not
    tag (``<nodeid>@<group>``, the only way its scheduler learns the group)."""
    return [i.nodeid for i in items if i.get_closest_marker("xdist_group") is not None and "@" not in i.nodeid]


def pytest_collection_finish(session) -> None:
    """Under ``--dist loadgroup`` every grouped test must carry its group: pytest-xdist 3.8 writes
    it into a node id field that pytest 9.2 no longer reads (pytest-xdist issue 1386), and then
    each worker silently starts its own copy of a group's costly fixture (the three-node cluster)."""
    if getattr(session.config.option, "loadgroup", False):
        missing = ungrouped(session.items)
        if missing:
            raise pytest.UsageError(
                f"pytest-xdist --dist loadgroup did not group {len(missing)} tests (e.g. {missing[0]}): its group "
                "suffix is not in the node id (pytest-xdist 3.8 with pytest 9.2: pyproject pins a pytest that works)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    if not any(item.get_closest_marker(m) for m in JVM_MARKS):
        _guard.begin()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    started: list[str] = []
    try:
        result = yield
    finally:
        if _guard.active:
            started = _guard.end()
    if started:
        pytest.fail(f"{item.nodeid} has no 'spark' or 'kafka' mark but started: " + "; ".join(started)
                    + ". Use the session's fixtures (their marks are derived: tests/suite.py FIXTURE_MARKS) "
                    "or mark the test by hand.", pytrace=False)
    return result


def pytest_sessionfinish(session) -> None:
    twice = modules_loaded_twice(sys.modules, session.config.rootpath)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:                 # an xdist worker: the controller reports it
        workeroutput[_TWICE_KEY] = twice
        return
    twice = {**session.config._modules_loaded_twice, **twice}
    if twice:
        lines = "\n".join(f"  {f}: {', '.join(n)}" for f, n in twice.items())
        message = f"FAILED: files loaded as two modules (import each as dataflow_kafka.*, tests.* or bench.* only):\n{lines}"
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        reporter.write_line(message, red=True) if reporter else print(message, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist's controller: a worker finished; keep what it found for the session's end."""
    twice = getattr(node, "workeroutput", {}).get(_TWICE_KEY)
    if twice:
        node.config._modules_loaded_twice.update(twice)
