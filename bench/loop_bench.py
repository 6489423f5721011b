"""The loop's own cost: per-turn overhead excluding the model, worker start-up, prompt size.

A scripted model (no latency) drives 60 turns of peek / grep / execute over
the real Apache log; the overhead of a turn is its duration minus the model
call's own latency (prompt building, parsing, the sandbox round trip,
ledger, trace write). Worker start-up is timed separately, with `true` and
`python -c pass` as references measured in the same run.

    python bench/loop_bench.py [--turns 60] [--starts 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "fixtures" / "data"
LOG = DATA / "elastic" / "apache_logs"

ACTIONS = [
    {"tool": "peek", "args": {"start": 100, "length": 20}},
    {"tool": "grep", "args": {"pattern": '" 404 ', "max_matches": 20}},
    {
        "tool": "execute",
        "args": {
            "code": "from collections import Counter\nc = Counter(l.split()[0] for l in context_lines)\nprint(c.most_common(3))"
        },
    },
    {"tool": "grep", "args": {"pattern": "Googlebot|bingbot", "ignore_case": True}},
    {"tool": "execute", "args": {"code": "print(sum(1 for l in context_lines if '\" 500 ' in l))"}},
]


def loop_overhead(workdir: Path, turns: int) -> tuple[list[float], dict]:
    from rlm.run.settings import load_settings
    from rlm.run.wiring import run_ask

    replies = [ACTIONS[i % len(ACTIONS)] for i in range(turns - 1)]
    replies += [{"tool": "final", "args": {"answer": "done"}}, "done"]
    script = workdir / "loop.json"
    script.write_text(json.dumps(replies))
    settings = load_settings(
        {"model": f"scripted/{script}", "max_steps": turns, "trace_dir": str(workdir / "traces")}
    )
    result = run_ask(settings, str(LOG), "bench")
    trace = json.loads(Path(result.trace_path).read_text())
    overheads = [s["duration_s"] - s["model_call"]["latency_s"] for s in trace["steps"][1:]]  # first: warm-up
    return overheads, trace["totals"]


def worker_starts(n: int) -> list[float]:
    from rlm.input.source import open_source
    from rlm.sandbox.client import Sandbox, WorkerSpec

    with open_source(str(LOG)) as src:
        times = []
        for _ in range(n):
            sb = Sandbox(WorkerSpec(path=src.path, index_path=src.profile.index_path, memory_bytes=1 << 31))
            t = time.perf_counter()
            sb.start()
            times.append(time.perf_counter() - t)
            sb.close()
    return times


def reference(cmd: list[str], n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(cmd, check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=60)
    ap.add_argument("--starts", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        overheads, totals = loop_overhead(Path(tmp), args.turns)
        starts = worker_starts(args.starts)
        py = reference([sys.executable, "-c", "pass"], args.starts)
    ms = [o * 1000 for o in overheads]
    print(
        f"turns: {len(ms)}  per-turn overhead excluding the model: median {statistics.median(ms):.1f} ms, "
        f"p90 {sorted(ms)[int(len(ms) * 0.9)]:.1f} ms, max {max(ms):.1f} ms"
    )
    print(
        f"largest prompt: {totals['largest_prompt_tokens']:,} tokens over {totals['steps']} steps "
        f"({totals['prompt_tokens']:,} prompt tokens in all)"
    )
    s = statistics.median(starts) * 1000
    print(
        f"worker start-up (10,000-line input, sandbox layers on): median {s:.0f} ms; "
        f"`python -c pass` {py * 1000:.0f} ms; ratio {s / (py * 1000):.1f}x"
    )


if __name__ == "__main__":
    main()
