"""Costs of the raw-stream formats, measured against the work they sit next to.

    .venv/bin/python bench/stream_formats.py [--repeat 5]

1. CRC32C of TFRecord data (`collectors.protowire`): the pure-Python table loop (`crc32c_py`) against
   the numpy lane path (`crc32c`) on one synthetic AndroidControl episode (11 screens: 300 KB of
   random bytes as each screenshot, a forest of 301 nodes each; 10 actions), next to converting that
   episode (`AndroidControlImporter.convert`: decoding the Example and the forests, rendering, turns).
   Then the numpy path at other lane widths (`protowire._LANE`) and the size where it overtakes the
   pure loop (`protowire._NUMPY_FROM`).
2. The raw-stream sniffers every input's head passes before JSON parsing (`container = "text"`
   importers), on the heads of `bench/ingest_parts.py`'s 64 MiB split of the generated ingest
   corpus, against the project's ingest CPU for the same split (that script's stage total, measured
   here again in one process, fastest of `--repeat`).

Each figure is the fastest of `--repeat` runs (CPU seconds of this process). Results go to
`docs/benchmarks.md` under "## Raw-stream formats (bench/stream_formats.py)".
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.benchdoc import DOC, cpu_model, write_section  # noqa: E402

SECTION = "## Raw-stream formats (bench/stream_formats.py)"


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def synthetic_episode(seed: int = 0) -> bytes:
    """The serialized Example of one large episode, built with the official protobuf library."""
    import random

    from tests.collectors import android_control_support as S

    rng = random.Random(seed)
    trees = []
    for screen in range(11):
        views = [S.node(0, "android.widget.FrameLayout", (0, 0, 1080, 2400), tuple(range(1, 301)))]
        views += [S.node(i, "android.widget.TextView", (0, 8 * i, 1080, 8 * i + 8), text=f"item {screen}-{i}")
                  for i in range(1, 301)]
        trees.append(S.forest(S.window(1, 1, "App", views, is_active=True)))
    actions = [{"action_type": "click", "x": 10 * i, "y": 20 * i} for i in range(10)]
    shots = [rng.randbytes(300_000) for _ in trees]
    return S.example({
        "episode_id": ("int64_list", [1]), "goal": ("bytes_list", [b"Open the app"]),
        "screenshots": ("bytes_list", shots), "screenshot_widths": ("int64_list", [1080] * 11),
        "screenshot_heights": ("int64_list", [2400] * 11), "accessibility_trees": ("bytes_list", trees),
        "actions": ("bytes_list", [orjson_dumps(a) for a in actions]),
        "step_instructions": ("bytes_list", [f"step {i}".encode() for i in range(10)]),
    })


def orjson_dumps(obj: object) -> bytes:
    import orjson

    return orjson.dumps(obj)


def crc_costs(repeat: int) -> dict:
    from collectors import protowire as pw
    from collectors.android_control import AndroidControlImporter
    from collectors.base import ImportContext

    data = synthetic_episode()
    if pw.crc32c(data) != pw.crc32c_py(data):
        raise SystemExit("stream_formats: the numpy CRC differs from the pure-Python one")
    imp, ctx = AndroidControlImporter(), ImportContext("bench", "0" * 64)
    record = pw.TFRecord(0, 0, data)
    turns = len(imp.convert(record, "record:0", ctx).turns)
    out = {"bytes": len(data), "turns": turns,
           "py": _best(lambda: pw.crc32c_py(data), max(1, repeat // 2)),
           "np": _best(lambda: pw.crc32c(data), repeat),
           "convert": _best(lambda: imp.convert(record, "record:0", ctx), repeat),
           "lanes": {}, "small": {}}
    default_lane = pw._LANE
    try:
        for lane in (128, 256, 512, 1024):
            pw._LANE = lane
            pw._zeros_operator.cache_clear()
            out["lanes"][lane] = {size: _best(lambda n=size: pw.crc32c(data[:n]), repeat)
                                  for size in (64 << 10, 4 << 20)}
    finally:
        pw._LANE = default_lane
        pw._zeros_operator.cache_clear()
    for size in (2 << 10, 4 << 10, 8 << 10, 12 << 10, 16 << 10, 32 << 10):
        chunk = data[:size]
        runs = max(1, 500_000 // size)  # enough calls to time a small input
        out["small"][size] = (_best(lambda c=chunk, r=runs: [pw.crc32c_py(c) for _ in range(r)], repeat) / runs,
                              _best(lambda c=chunk, r=runs: [pw._crc32c_lanes(c) for _ in range(r)], repeat) / runs)
    return out


def sniff_costs(repeat: int) -> dict:
    from bench.ingest_parts import project_stages, split_input
    from collectors.registry import IMPORTERS
    from pipelines.gcpause import fewer_gc_passes
    from pipelines.ingest import preload_for_workers
    from pipelines.sources import ReadLimits

    files, spec = split_input(64.0, 0)
    n = ReadLimits().head_bytes
    heads = []
    for p in files:
        with open(p, "rb") as f:
            heads.append(f.read(n))
    text = [imp for imp in IMPORTERS if imp.container == "text"]
    claimed = {imp.name: sum(bool(imp.sniff(h)) for h in heads) for imp in text}
    per_imp = {imp.name: _best(lambda i=imp: [i.sniff(h) for h in heads], repeat) for imp in text}
    preload_for_workers()
    best = float("inf")
    for _ in range(repeat):
        times: dict[str, float] = {}
        with tempfile.TemporaryDirectory() as tmp, fewer_gc_passes():
            project_stages(files, times, Path(tmp))
        best = min(best, sum(v for k, v in times.items() if "of which" not in k))
    return {"files": len(files), "mb": spec["bytes"] / 1e6, "per_importer": per_imp, "claimed": claimed,
            "project": best}


def body(crc: dict, sniff: dict, repeat: int) -> str:
    from collectors.protowire import _NUMPY_FROM as pw_from

    mib = crc["bytes"] / (1 << 20)
    lanes = "\n".join(f"| {lane} | {v[64 << 10] * 1e3:.2f} | {v[4 << 20] * 1e3:.1f} |" for lane, v in crc["lanes"].items())
    small = "\n".join(f"| {size >> 10} KiB | {py * 1e6:.0f} | {np_ * 1e6:.0f} |" for size, (py, np_) in crc["small"].items())
    total = sum(sniff["per_importer"].values())
    rows = "\n".join(f"| `{name}` | {s * 1e3:.1f} | {s / sniff['files'] * 1e6:.1f} | {sniff['claimed'][name]} |"
                     for name, s in sniff["per_importer"].items())
    return f"""Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores ({cpu_model()}),
Python {sys.version.split()[0]}; CPU seconds, fastest of {repeat}.
Rerun: `.venv/bin/python bench/stream_formats.py`.

CRC32C of one synthetic AndroidControl episode ({mib:.2f} MiB, {crc['turns']} turns):

| what | ms | MiB/s |
|---|---:|---:|
| pure-Python table loop (`crc32c_py`) | {crc['py'] * 1e3:.0f} | {mib / crc['py']:.1f} |
| numpy lanes (`crc32c`, the path ingest uses) | {crc['np'] * 1e3:.1f} | {mib / crc['np']:.0f} |
| converting the episode (`AndroidControlImporter.convert`) | {crc['convert'] * 1e3:.0f} | |

- verifying in pure Python would cost {crc['py'] / crc['convert']:.1f}x the conversion; with numpy {crc['np'] / crc['convert']:.2f}x
  (numpy {crc['py'] / crc['np']:.0f}x faster than the pure loop)

numpy path by lane width (`protowire._LANE`), ms:

| lane bytes | 64 KiB | 4 MiB |
|---|---:|---:|
{lanes}

Small inputs, µs per call of each path (`crc32c` takes the pure loop below `protowire._NUMPY_FROM`,
{pw_from >> 10} KiB: the lanes cost about one numpy step per lane byte whatever the size):

| size | pure loop | numpy lanes |
|---|---:|---:|
{small}

Raw-stream sniffers on the heads of {sniff['files']} inputs ({sniff['mb']:.1f} MB, `bench/ingest_parts.py`'s split):

| importer | ms for all heads | µs per input | inputs claimed |
|---|---:|---:|---:|
{rows}

- together {total * 1e3:.1f} ms, {100 * total / sniff['project']:.1f}% of the project's ingest CPU for the same input
  ({sniff['project']:.2f} s, `bench/ingest_parts.py`'s stages, one process)"""


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-doc", action="store_true")
    a = p.parse_args(argv)
    text = body(crc_costs(a.repeat), sniff_costs(a.repeat), a.repeat)
    print(text)
    if not a.no_doc:
        write_section(DOC, SECTION, text)
        print(f"written to {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
