"""One Kafka broker for all pytest-xdist workers of a run.

The first worker that needs a broker takes a file lock in the run's shared folder and starts a
host process, ``python -m tests.shared_broker WORKDIR STATE``, in a session of its own: the host
starts the broker with :func:`dataflow_kafka.brokers.kafka_broker` (the same kind a run without
workers gets), writes its address to ``STATE`` and waits; the other workers read ``STATE``. The
host exits when the broker dies, and stops the broker (``Broker.stop``: SIGTERM, then SIGKILL) on
SIGTERM, which the controller sends at the end of the run (:func:`stop`, by the host's pid).

A test that stops, kills or restarts a broker must use a broker of its own (``own_broker``):
the shared one serves the other worker's tests at the same time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dataflow_kafka.brokers import Broker

__all__ = ["SharedBroker", "attach", "stop", "ENV"]

#: the folder shared by the controller and its workers (set by tests/conftest.py in the controller)
ENV = "DATAFLOW_KAFKA_TEST_SHARED_DIR"
_STATE = "broker.json"
_ROOT = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class SharedBroker(Broker):
    """The broker as a worker sees it: not managed here (no stop, kill or restart), alive while its
    host process is."""

    host_pid: int = 0

    def exit_code(self) -> int | None:
        return None if _alive(self.host_pid) else -1


def attach(shared_dir: Path, timeout_s: float = 240.0) -> SharedBroker:
    """The run's broker: started by the first caller (under a file lock), read by the others."""
    from filelock import FileLock

    state = shared_dir / _STATE
    with FileLock(str(shared_dir / "broker.lock"), timeout=timeout_s):
        if not state.exists():
            _start_host(shared_dir, state, timeout_s)
        info = json.loads(state.read_text())
    return SharedBroker(info["kind"], info["bootstrap_servers"], log_path=Path(info["log_path"]),
                        host_pid=info["host_pid"])


def _start_host(shared_dir: Path, state: Path, timeout_s: float) -> None:
    log_path = shared_dir / "broker-host.log"
    with open(log_path, "ab") as log:
        host = subprocess.Popen([sys.executable, "-m", "tests.shared_broker", str(shared_dir / "broker"), str(state)],
                                cwd=_ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while not state.exists():
        if host.poll() is not None or time.monotonic() > deadline:
            host.kill()
            raise RuntimeError(f"the shared broker did not start (host exit code {host.poll()}):\n"
                               + log_path.read_text(errors="replace")[-3000:])
        time.sleep(0.2)


def stop(shared_dir: Path, timeout_s: float = 90.0) -> str | None:
    """Stop the run's broker, if a worker started one: SIGTERM to its host, SIGKILL to the host's
    and the broker's process groups if the host is still there after ``timeout_s``. Returns what
    was done, for the run's summary."""
    state = shared_dir / _STATE
    if not state.exists():
        return None
    pid = json.loads(state.read_text())["host_pid"]
    children = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _ppid(p) == pid]
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not _alive(pid):
        return f"stopped the shared broker (host pid {pid})"
    for group in (pid, *children):
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return f"killed the shared broker's host (pid {pid}) and its children {children}: no exit within {timeout_s} s"


def _ppid(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _host(workdir: str, state: str) -> None:
    from dataflow_kafka.brokers import kafka_broker

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))        # unwinds the with: the broker stops
    Path(workdir).mkdir(parents=True, exist_ok=True)
    with kafka_broker(workdir=workdir) as b:
        tmp = Path(state).with_suffix(".tmp")
        tmp.write_text(json.dumps({"kind": b.kind, "bootstrap_servers": b.bootstrap_servers,
                                   "log_path": str(b.log_path), "host_pid": os.getpid()}))
        tmp.replace(state)
        while b.exit_code() is None:
            time.sleep(1.0)
        print(f"the {b.kind} broker exited with code {b.exit_code()}; last log lines:\n{b.logs()}", flush=True)


if __name__ == "__main__":
    _host(*sys.argv[1:3])
