"""py-spy flame graphs of Spark's Python workers during a benchmark's steady state.

:class:`WorkerProfiler` attaches ``py-spy record --subprocesses`` to each Python daemon that Spark's
JVM forks its Python workers from (the source's ``read()``, ``mapInPandas`` steps and the
``transformWithStateInPandas`` workers run there; Spark keeps a daemon per kind of worker), from
:meth:`start` (the end of the first micro-batch, :mod:`bench.nexmark.throughput`) to :meth:`stop`,
and writes the collapsed stacks (``<path>``, one line per stack and its sample count) that
:mod:`bench.nexmark.flame` turns into a flame graph and a table of where the time went per stage
of the path. py-spy samples the processes from outside (no change to what runs) at ``rate`` samples per second;
``--idle`` is off, so a sample is a stack that was on a CPU: the graph attributes CPU, not wall
time. Needs ``py-spy`` (the ``bench`` extra) and permission to ptrace the workers (same user).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["WorkerProfiler", "py_spy"]


def py_spy() -> str | None:
    """The py-spy executable beside this interpreter, or on PATH; None when not installed."""
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


class WorkerProfiler:
    """One py-spy recording of Spark's Python daemon and its workers into ``path`` (collapsed stacks)."""

    def __init__(self, cpu, path: Path, rate: int = 100) -> None:
        self.cpu, self.path, self.rate = cpu, Path(path), rate
        self.procs: list[tuple[Path, subprocess.Popen]] = []

    def _daemon_pids(self) -> list[int]:
        """Every ``pyspark.daemon`` under Spark's JVM: Spark keeps one per kind of Python worker (the
        source's reads and the ``transformWithStateInPandas`` workers came from different ones)."""
        out = []
        for pid in self.cpu.python_pids():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"pyspark.daemon" in f.read():
                        out.append(pid)
            except OSError:
                pass
        parents = set(out)
        return [p for p in out if self._parent(p) not in parents]     # daemons, not their forked workers

    @staticmethod
    def _parent(pid: int) -> int | None:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return None

    def start(self) -> None:
        exe, pids = py_spy(), self._daemon_pids()
        if exe is None or not pids:
            print(f"  profile: {'py-spy is not installed' if exe is None else 'no pyspark.daemon found'}; skipped",
                  flush=True)
            self.path = Path("")
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for pid in pids:
            part = self.path.with_name(f"{self.path.name}.{pid}")
            self.procs.append((part, subprocess.Popen(
                [exe, "record", "--pid", str(pid), "--subprocesses", "--rate", str(self.rate), "--nonblocking",
                 "--format", "raw", "--output", str(part)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))

    def stop(self) -> None:
        """Stop the recordings (SIGINT: py-spy then writes its stacks) and merge them into ``path``."""
        if not self.procs:
            return
        for _, proc in self.procs:
            proc.send_signal(signal.SIGINT)
        lines: list[str] = []
        for part, proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if part.exists():
                lines += part.read_text().splitlines()
                part.unlink()
            else:
                err = proc.stderr.read().decode(errors="replace")[-300:] if proc.stderr else ""
                print(f"  profile: py-spy wrote nothing for {part.suffix[1:]} ({err.strip()})", flush=True)
        self.path.write_text("\n".join(lines) + "\n")
        self.procs = []
