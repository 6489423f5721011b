"""What a user waits for on a 1 GB log, through the product path.

Builds a log of --size-mb from the real Apache lines (tests/bigfiles.py), then
runs `rlm ask` as a user does (the CLI in a subprocess, the locked-down
worker, its prebuilt index, default settings) with a scripted model that
takes three actions: a literal grep, a regex grep and an `execute` cell that
counts a substring over every line. Each action's time is read from the
trace (the step's duration less the model call's own latency), and set
against references measured in the same run, the page cache hot for all:

  * the grep actions against `grep -c` and `grep -cE` over the same file;
  * the full pass against the same loop in plain Python, outside any sandbox;
  * the whole run's wall time, cold (first question: index, profile, sha256)
    and warm (second question: the cached index), split into where it goes.

Prints a table of medians over --repeats runs and the ratios, and a JSON line.

    python bench/real_path_bench.py [--size-mb 1024] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import bigfiles  # noqa: E402  (tests/bigfiles.py: the real-line file builders)

LITERAL = "Googlebot"
REGEX = r'" (4|5)[0-9]{2} '
FULL_PASS = f"print(sum(1 for line in context_lines if {LITERAL!r} in line))"
PLAIN_PASS = f"""
import sys, time
t0 = time.perf_counter()
with open(sys.argv[1], encoding="utf-8", errors="replace") as fh:
    n = sum(1 for line in fh if {LITERAL!r} in line)
print(time.perf_counter() - t0, n)
"""


def timed(cmd: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    return time.perf_counter() - t0, out


def ask(log: Path, work: Path, cache: Path) -> dict[str, float]:
    """One `rlm ask` with the three actions; seconds per action (model latency excluded) and wall."""
    script = work / "script.json"
    script.write_text(
        json.dumps(
            [
                {"tool": "grep", "args": {"pattern": LITERAL}},
                {"tool": "grep", "args": {"pattern": REGEX}},
                {"tool": "execute", "args": {"code": FULL_PASS}},
                {"tool": "final", "args": {"answer": "done"}},
                "done",
            ]
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    # Each run alone, as the figures before warm processes were measured: none serves it, none is left.
    env.update({"RLM_CACHE_DIR": str(cache), "XDG_CONFIG_HOME": str(work / ".config"), "RLM_NO_WARM": "1"})
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "rlm", "ask", str(log), "q", "-m", f"scripted/{script}", "--json", "-q"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    doc = json.loads(proc.stdout)
    trace = json.loads((work / doc["trace"]).read_text())  # relative to the run's directory
    steps = [s for s in trace["steps"] if s["node"] == "n0"]
    for s in steps:
        if "internal error" in s["observation"]["preview"] or not s["observation"]["ok"]:
            raise RuntimeError(f"a step failed: {s['observation']['preview'][:300]}")

    def action_s(i: int) -> float:
        return steps[i]["duration_s"] - steps[i]["model_call"]["latency_s"]

    started = trace.get("sandbox", {}).get("startup_s", 0.0)
    return {
        "grep_literal": action_s(0),
        "grep_regex": action_s(1),
        "full_pass": action_s(2),
        "worker_start": started,
        "wall": wall,
        "actions": sum(action_s(i) for i in range(3)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rlm-realpath-", dir=args.dir))
    log = work / "access.log"
    try:
        size = bigfiles.apache_log(log, args.size_mb * 1_000_000)
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # page cache hot for all
        cache = work / "cache"
        cold = ask(log, work, cache)  # first question: builds the index
        runs: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            for key, value in ask(log, work, cache).items():
                runs.setdefault(key, []).append(value)
            runs.setdefault("grep_c", []).append(timed(["grep", "-c", LITERAL, str(log)])[0])
            runs.setdefault("grep_cE", []).append(timed(["grep", "-cE", REGEX, str(log)])[0])
            plain = subprocess.run(
                [sys.executable, "-c", PLAIN_PASS, str(log)], capture_output=True, text=True, check=True
            )
            runs.setdefault("plain_pass", []).append(float(plain.stdout.split()[0]))
        med = {k: statistics.median(v) for k, v in runs.items()}
        ratios = {
            "grep literal / grep -c": med["grep_literal"] / med["grep_c"],
            "grep regex / grep -cE": med["grep_regex"] / med["grep_cE"],
            "full pass / plain Python": med["full_pass"] / med["plain_pass"],
        }
        print(f"file: {size / 1e9:.2f} GB, {args.repeats} warm runs (medians), one cold run first")
        rows = [
            ("grep action, literal", med["grep_literal"], "grep -c", med["grep_c"]),
            ("grep action, regex", med["grep_regex"], "grep -cE", med["grep_cE"]),
            ("execute: full pass", med["full_pass"], "same loop, plain Python", med["plain_pass"]),
        ]
        for name, ours, ref_name, ref in rows:
            print(f"  {name:<24} {ours:7.3f} s   {ref_name:<24} {ref:7.3f} s   ratio {ours / ref:5.2f}")
        print(
            f"  whole run, warm: {med['wall']:.2f} s wall = actions {med['actions']:.2f} s + worker start "
            f"{med['worker_start']:.2f} s + the rest {med['wall'] - med['actions'] - med['worker_start']:.2f} s "
            "(interpreter, imports, profile, trace)"
        )
        print(f"  whole run, cold (first question, index built): {cold['wall']:.2f} s wall")
        print(json.dumps({"medians": med, "ratios": ratios, "cold_wall": cold["wall"]}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
