"""How long `rlm replay` takes on a 50-step trace, and how big a trace is per step.

    .venv/bin/python bench/replay_bench.py [--runs 15] [--keep DIR]

Makes a 50-step trace with the scripted model over fixtures/access.log (peek,
grep and execute steps in turn, then final), then times the `rlm` console
script as a user runs it: `rlm replay TRACE` (plain text, stdout a pipe) and
`rlm replay TRACE --json`, start-up included. Prints the medians, the trace's
bytes per step, and whether litellm was imported (it must not be).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "access.log"
STEPS = 50


def _replies() -> list[object]:
    replies: list[object] = []
    for i in range(STEPS - 1):
        kind = i % 3
        if kind == 0:
            replies.append({"tool": "peek", "args": {"start": 1 + i * 37, "length": 25}})
        elif kind == 1:
            replies.append({"tool": "grep", "args": {"pattern": f'" {400 + i % 5}0? ', "max_matches": 40}})
        else:
            code = f"from collections import Counter\nc = Counter(l.split()[0] for l in context_lines[{i * 30}:{i * 30 + 400}])\nprint(c.most_common(8))"
            replies.append({"tool": "execute", "args": {"code": code}})
    replies += [{"tool": "final", "args": {"answer": "done"}}, "The investigation is done [F1]."]
    return replies


def make_trace(workdir: Path, rlm: list[str]) -> Path:
    script = workdir / "s.json"
    script.write_text(json.dumps(_replies()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    env["RLM_CACHE_DIR"] = str(workdir / ".cache")
    proc = subprocess.run(
        [
            *rlm,
            "ask",
            str(FIXTURE),
            "what happens in this log?",
            "-m",
            f"scripted/{script}",
            "--max-steps",
            "60",
            "-q",
        ],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        sys.exit(f"the scripted run failed: {proc.stderr}")
    return sorted((workdir / "traces").glob("*.json"))[-1]


def time_command(cmd: list[str], runs: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU (user+sys) seconds of each run; CPU time says more on a busy machine."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed: {proc.stderr.decode()}")
    return walls, cpus


def _ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:.0f} ms (min {min(values) * 1000:.0f}, max {max(values) * 1000:.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--keep", help="copy the 50-step trace here")
    args = parser.parse_args()
    exe = Path(sys.executable).with_name("rlm")
    rlm = [str(exe)] if exe.exists() else [sys.executable, "-m", "rlm"]
    workdir = Path(tempfile.mkdtemp(prefix="rlm-replay-bench-"))
    try:
        trace = make_trace(workdir, rlm)
        doc = json.loads(trace.read_text())
        steps = len(doc["steps"])
        size = trace.stat().st_size
        print(f"trace: {steps} steps, {size:,} bytes, {size / steps:,.0f} bytes per step")
        for label, extra in (("replay (plain text)", []), ("replay --json", ["--json"])):
            wall, cpu = time_command([*rlm, "replay", str(trace), *extra], args.runs)
            print(f"{label}, {args.runs} runs: wall {_ms(wall)}; cpu {_ms(cpu)}")
        wall, cpu = time_command([sys.executable, "-c", "pass"], args.runs)
        print(
            f"(python start-up alone: wall {_ms(wall)}; cpu {_ms(cpu)}; load average {os.getloadavg()[0]:.1f})"
        )
        imported = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "rlm", "replay", str(trace)],
            capture_output=True,
            text=True,
        )
        heavy = sorted(
            {line.split("|")[-1].strip() for line in imported.stderr.splitlines() if "litellm" in line}
        )
        print("litellm imported by replay:", "yes: " + ", ".join(heavy[:3]) if heavy else "no")
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            shutil.copy(trace, args.keep)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
