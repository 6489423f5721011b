"""partition_map fan-out: 64 chunks against a model stub with 0.5 s latency per call.

Ideal wall time with concurrency C is ceil(64 / C) * 0.5 s; the goal is
within 1.3x of it at C = 16 (2 s). The stub is the scripted provider inside
litellm (the real async path: litellm.acompletion, the semaphore, the budget).

    python bench/fanout_bench.py [--chunks 64] [--latency 0.5] [--concurrency 16] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "fixtures" / "data"


def hdfs_log(workdir: Path, chunks: int, per_chunk: int) -> Path:
    """Real HDFS lines, as many as make `chunks` equal chunks of `per_chunk` lines."""
    lines = (DATA / "loghub" / "HDFS_2k.log").read_text().splitlines()
    while len(lines) < chunks * per_chunk:
        lines += lines
    source = workdir / "hdfs.log"
    source.write_text("\n".join(lines[: chunks * per_chunk]) + "\n")
    return source


def one_run(workdir: Path, chunks: int, latency: float, concurrency: int) -> float:
    from rlm.run.settings import load_settings
    from rlm.run.wiring import run_ask

    per_chunk = 30
    source = hdfs_log(workdir, chunks, per_chunk)
    script = Path(tempfile.mkstemp(suffix=".json", dir=workdir)[1])  # a fresh script per run
    script.write_text(
        json.dumps(
            {
                "replies": [
                    {"tool": "partition_map", "args": {"question": "count", "chunk_lines": per_chunk}},
                    {"tool": "final", "args": {"answer": "done"}},
                    "done",
                ],
                "rules": [{"match": "Excerpt", "reply": {"content": "3", "delay": latency}}],
            }
        )
    )
    settings = load_settings(
        {"model": f"scripted/{script}", "concurrency": concurrency, "trace_dir": str(workdir / "traces")}
    )
    result = run_ask(settings, str(source), "how many blocks per chunk?")
    trace = json.loads(Path(result.trace_path).read_text())
    if not trace["steps"]:
        raise SystemExit(f"the run failed: {result.message}")
    step = trace["steps"][0]
    assert step["observation"]["preview"].startswith(f"{chunks} chunks"), step["observation"]["preview"][:80]
    return step["duration_s"] - step["model_call"]["latency_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 8])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        print(f"{'concurrency':>11} {'ideal s':>8} {'median s':>9} {'ratio':>6}  runs")
        for c in args.concurrency:
            ideal = math.ceil(args.chunks / c) * args.latency
            times = [one_run(Path(tmp), args.chunks, args.latency, c) for _ in range(args.repeats)]
            med = statistics.median(times)
            print(
                f"{c:>11} {ideal:>8.2f} {med:>9.2f} {med / ideal:>6.2f}  {', '.join(f'{t:.2f}' for t in times)}"
            )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
