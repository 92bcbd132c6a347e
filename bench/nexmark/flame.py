"""Where a record's CPU goes in Spark's Python workers: py-spy's collapsed stacks
(:mod:`bench.nexmark.profile`) attributed to the stages of the path, and drawn as flame graphs.

:data:`STAGES` names each stage of the path from ``Consumer.consume`` to the sink with the frames
that belong to it; a sample counts for the stage of its innermost frame that names one (a stack
in ``json.loads`` under a JSON field of a stage input counts as JSON decoding of stage inputs, under
``kafka_read.decode`` as the source's decoding). Stacks of pyspark's daemon process waiting for a
task are idle and left out; a forked worker's stack that ends in the daemon's loop is the worker
between two tasks, where the daemon runs a full ``gc.collect()`` (:data:`BETWEEN_TASKS`, counted:
until 2026-12-02 these were left out as idle too). :func:`render_svg` draws the stacks as a flame graph (the root at the
bottom, the width of a frame its share of samples), each frame coloured by its stage.

    python -m bench.nexmark.flame DIR [--svg-dir docs/img --prefix nexmark-profile-]   # per *.txt(.gz)
"""

from __future__ import annotations

import argparse
import html
from collections import Counter
from pathlib import Path

__all__ = ["STAGES", "read_stacks", "attribute", "render_svg", "stage_table", "main"]

#: (stage, colour, frame substrings), innermost stage first where frames nest.
STAGES: list[tuple[str, str, tuple[str, ...]]] = [
    # a poll and its messages made columns (RecordColumns.of, _timestamps) are the consume: they ran
    # inside fetch_range until the source's read became columns (2026-11-29)
    ("Kafka consume (librdkafka, a Python object per record)", "#d62728", ("fetch_range (datasource/kafka_read.py",
                                                                            "_poll (datasource/kafka_read.py",
                                                                            "RecordColumns.of (datasource/kafka_read.py",
                                                                            "_timestamps (datasource/kafka_read.py")),
    # the event times' pass and its helpers (until 2026-12-02 afternoon ``_event_times_pass`` and
    # ``_lines`` fell to "source other")
    ("source decoding (event times, pyarrow.json)", "#ff7f0e", ("decode (datasource/kafka_read.py",
                                                                 "event_times (datasource/kafka_read.py",
                                                                 "_event_times_vectorised (", "_event_times_per_record (",
                                                                 "_event_times_pass (", "_int_fields_in_c (",
                                                                 "_lines (datasource/kafka_read.py")),
    ("source rows to Arrow", "#ffbb78", ("records_to_batch (", "make_rows_batch (")),
    ("source other (range stats, planning)", "#e7969c", ("datasource/range_stats.py", "datasource/source.py",
                                                         "datasource/kafka_read.py")),
    ("JSON fields of stage inputs (per row, or pyarrow.json)", "#9467bd", ("bench/nexmark/query.py",
                                                                         "_JsonField.")),
    ("computed inputs, JSON out (json_object)", "#c5b0d5", ("keygroups/computed.py",)),
    ("key-group packing (Arrow IPC)", "#8c564b", ("keygroups/packed.py", "_pack_frame (", "_ingest_frame (")),
    ("engines (slicer, Dataflow, aggregations)", "#2ca02c", ("slicer/", "watermarks/", "windowing/", "joins/",
                                                             "bench/nexmark/aggregations.py")),
    ("stage layer (split, conform, state codec)", "#98df8a", ("keygroups/",)),
    ("state store calls (transformWithState API)", "#17becf", ("stateful_processor_api_client.py",
                                                               "value_state_client.py", "stateful_processor.py")),
    ("pandas to Arrow (pyspark)", "#1f77b4", ("PandasToArrowConversion", "_create_batch (", "_create_array (")),
    ("Arrow to pandas (pyspark)", "#aec7e8", ("ArrowToPandas", "arrow_to_pandas", "_arrow_to_pandas",
                                              "ArrowTableToRowsConversion", "convert_pandas_to_arrow_batch")),
    ("sink", "#bcbd22", ("datasource/sink.py",)),
    ("a worker between tasks (pyspark's daemon: gc.collect)", "#393b79", ("<between tasks:",)),
    ("talking to the JVM (sockets, framing)", "#7f7f7f", ("socket.py", "pyspark/serializers.py")),
    ("pyspark worker, other", "#c7c7c7", ("pyspark/",)),
]
OTHER = ("other (pandas, numpy, pyarrow outside the above)", "#dbdb8d")
_IDLE_LEAVES = ("manager (pyspark/daemon.py",)
#: The frame added under a forked worker's stack that ends in the daemon's loop (``manager``): the
#: worker between tasks, where pyspark's daemon runs ``gc.collect()`` after each task.
BETWEEN_TASKS = "<between tasks: the daemon's gc.collect()>"


def read_stacks(path: Path) -> Counter:
    """``{stack (frames root first, without py-spy's process frames): samples}`` of a collapsed file
    (gzipped if its name ends in ``.gz``)."""
    import gzip

    path = Path(path)
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    out: Counter = Counter()
    for line in text.splitlines():
        if not line.strip():
            continue
        stack, _, n = line.rpartition(" ")
        parts = stack.split(";")
        frames = tuple(f for f in parts if not f.startswith("process "))
        forked = len(parts) - len(frames) > 1       # py-spy names the daemon, then the forked worker
        if forked and frames and frames[-1].startswith(_IDLE_LEAVES):
            frames += (BETWEEN_TASKS,)
        if frames:
            out[frames] += int(n)
    return out


def _idle(frames: tuple[str, ...]) -> bool:
    return frames[-1].startswith(_IDLE_LEAVES)


def stage_of(frames: tuple[str, ...]) -> str:
    for frame in reversed(frames):
        for name, _, marks in STAGES:
            if any(m in frame for m in marks):
                return name
    return OTHER[0]


def attribute(stacks: Counter) -> tuple[Counter, int]:
    """``({stage: samples}, idle samples)`` of ``stacks``."""
    by: Counter = Counter()
    idle = 0
    for frames, n in stacks.items():
        if _idle(frames):
            idle += n
        else:
            by[stage_of(frames)] += n
    return by, idle


def stage_table(stacks: Counter, title: str = "") -> str:
    by, idle = attribute(stacks)
    busy = sum(by.values()) or 1
    lines = [f"{title}: {sum(by.values())} busy samples ({idle} idle left out)" if title else "",
             "| stage of the path | share of busy samples |", "| --- | --- |"]
    order = [s[0] for s in STAGES] + [OTHER[0]]
    for name in order:
        if by.get(name):
            lines.append(f"| {name} | {by[name] / busy:.1%} |")
    return "\n".join(line for line in lines if line)


def render_svg(stacks: Counter, path: Path, title: str = "", width: int = 1200, row: int = 16) -> None:
    """A flame graph of ``stacks`` (idle stacks left out) into ``path``, frames coloured by stage."""
    tree: dict = {}
    total = 0
    for frames, n in stacks.items():
        if _idle(frames):
            continue
        total += n
        node = tree
        for i, f in enumerate(frames):
            entry = node.setdefault(f, [0, {}, stage_of(frames[: i + 1])])
            entry[0] += n
            node = entry[1]
    colours = {name: colour for name, colour, _ in STAGES} | {OTHER[0]: OTHER[1]}
    depth = [0]
    rects: list[str] = []

    def walk(node: dict, x: float, level: int) -> None:
        depth[0] = max(depth[0], level + 1)
        for name, (n, children, stage) in sorted(node.items(), key=lambda kv: kv[0]):
            w = n / total * width if total else 0
            if w >= 1.0:
                rects.append((x, level, w, name, n, stage))
                walk(children, x, level + 1)
            x += w

    walk(tree, 0.0, 0)
    legend_rows = len(STAGES) + 1
    top = 24
    height = top + depth[0] * row + 20 + legend_rows * 14
    base = top + depth[0] * row
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" '
           f'font-size="11">', f'<text x="4" y="16" font-size="13">{html.escape(title)} ({total} samples, '
                              f'idle left out)</text>']
    for x, level, w, name, n, stage in rects:
        y = base - (level + 1) * row
        label = html.escape(name)
        out.append(f'<g><title>{label} ({n} samples, {n / total:.1%}; {html.escape(stage)})</title>'
                   f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 1}" fill="{colours[stage]}" '
                   f'stroke="white" stroke-width="0.3"/>')
        if w > 40:
            chars = int(w / 6.6)
            text = name if len(name) <= chars else name[: max(0, chars - 2)] + ".."
            out.append(f'<text x="{x + 2:.1f}" y="{y + row - 4}">{html.escape(text)}</text>')
        out.append("</g>")
    by, _ = attribute(stacks)
    for i, (name, colour) in enumerate([(s[0], s[1]) for s in STAGES] + [OTHER]):
        y = base + 16 + i * 14
        share = by.get(name, 0) / total if total else 0
        out.append(f'<rect x="4" y="{y - 9}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="18" y="{y}">{html.escape(name)}: {share:.1%}</text>')
    out.append("</svg>")
    Path(path).write_text("\n".join(out))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.nexmark.flame", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", help="collapsed stacks (*.txt) of bench.nexmark.throughput --profile")
    p.add_argument("--svg-dir", help="write a flame graph per file here (default: beside the stacks)")
    p.add_argument("--prefix", default="", help="of the SVGs' names")
    a = p.parse_args(argv)
    for f in sorted([*Path(a.folder).glob("*.txt"), *Path(a.folder).glob("*.txt.gz")]):
        stem = f.name.removesuffix(".gz").removesuffix(".txt")
        stacks = read_stacks(f)
        print(stage_table(stacks, stem) + "\n")
        svg = Path(a.svg_dir or f.parent) / f"{a.prefix}{stem}.svg"
        svg.parent.mkdir(parents=True, exist_ok=True)
        render_svg(stacks, svg, stem)


if __name__ == "__main__":
    main()
