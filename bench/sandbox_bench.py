"""Sandbox benchmarks: the cost of the guarded language layer, and worker start-up.

    .venv/bin/python bench/sandbox_bench.py                 # 2.5 M lines, 200 MB start-up
    .venv/bin/python bench/sandbox_bench.py --lines 500000 --startup-mb 50

1. A loop over N log lines with `re.search` per line, run by the sandbox's
   Interpreter (RestrictedPython-compiled, guarded attribute access), against
   the same code compiled and run by plain CPython over the same list; then
   the same loop in the real worker over a file of N lines (mapped input,
   OS limits on). Goal: guarded / plain <= 2.5.
2. Worker start-up (spawn, open and index the input, imports, lock-down,
   ready) with a 200 MB input built by replaying real Apache lines, median of
   a few starts, and the first cell that touches every line.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlm.sandbox.client import Sandbox, WorkerSpec  # noqa: E402
from rlm.sandbox.worker.interpreter import Interpreter  # noqa: E402

APACHE = REPO.parent / "shared" / "data" / "elastic" / "apache_logs"

LOOP = """
import re
n = 0
for line in context_lines:
    if re.search(r'" 404 ', line):
        n += 1
print(n)
"""


def _sample_lines() -> list[str]:
    if APACHE.exists():
        return APACHE.read_text(encoding="utf-8", errors="replace").splitlines()
    return [
        f'10.0.0.{i % 250} - - [17/May/2015:10:05:03 +0000] "GET /p/{i} HTTP/1.1" {404 if i % 47 == 0 else 200} 512 "-" "bench"'
        for i in range(10_000)
    ]


def _lines(n: int) -> list[str]:
    sample = _sample_lines()
    reps, rest = divmod(n, len(sample))
    return sample * reps + sample[:rest]


def _best(fn, repeat: int) -> tuple[float, str]:
    times, out = [], ""
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
    return min(times), out


def bench_loop(n: int, repeat: int) -> dict:
    lines = _lines(n)

    def plain() -> str:
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(LOOP, "<plain>", "exec"), {"context_lines": lines, "re": re})
        return buf.getvalue()

    interp = Interpreter({"context_lines": lines})

    def guarded() -> str:
        outcome = interp.run(LOOP)
        if outcome.error:
            raise RuntimeError(outcome.error)
        return outcome.output

    # Interleaved, best of `repeat` each: other load on the machine hits both alike.
    plain_times, guarded_times = [], []
    plain_out = guarded_out = ""
    for _ in range(repeat):
        t, plain_out = _best(plain, 1)
        plain_times.append(t)
        t, guarded_out = _best(guarded, 1)
        guarded_times.append(t)
    plain_s, guarded_s = min(plain_times), min(guarded_times)
    if plain_out != guarded_out:
        raise RuntimeError(f"outputs differ: {plain_out!r} vs {guarded_out!r}")
    return {
        "lines": n,
        "matches": int(plain_out),
        "plain_s": round(plain_s, 3),
        "guarded_s": round(guarded_s, 3),
        "ratio": round(guarded_s / plain_s, 2),
    }


def _write_input(path: Path, size_bytes: int) -> int:
    sample = "\n".join(_sample_lines()) + "\n"
    block = sample.encode("utf-8")
    written = 0
    with path.open("wb") as fh:
        while written < size_bytes:
            fh.write(block)
            written += len(block)
    return written


def bench_worker(n: int, startup_mb: int, starts: int, tmp: Path) -> dict:
    loop_file = tmp / "loop.log"
    loop_file.write_text("\n".join(_lines(n)) + "\n", encoding="utf-8")
    with Sandbox(
        WorkerSpec(path=str(loop_file), memory_bytes=loop_file.stat().st_size * 3 + (512 << 20))
    ) as sandbox:
        sandbox.start()
        started = time.perf_counter()
        reply = sandbox.request("exec", timeout=600, code=LOOP, cpu_seconds=600)
        worker_loop_s = time.perf_counter() - started
        layers = sandbox.ready.get("sandbox", {})
    lines = loop_file.read_text(encoding="utf-8").splitlines()
    started = time.perf_counter()
    plain_n = sum(1 for line in lines if re.search(r'" 404 ', line))
    plain_file_s = time.perf_counter() - started
    if reply.get("error") or reply["output"] != f"{plain_n}\n":
        raise RuntimeError(f"worker loop failed: {reply}")

    big = tmp / "big.log"
    size = _write_input(big, startup_mb << 20)
    spec = WorkerSpec(path=str(big), memory_bytes=size * 3 + (512 << 20))
    times, first_cell = [], []
    for _ in range(starts):
        with Sandbox(spec) as sandbox:
            started = time.perf_counter()
            ready = sandbox.start()
            times.append(time.perf_counter() - started)
            started = time.perf_counter()
            sandbox.request("exec", timeout=600, code="print(len(context_lines))", cpu_seconds=600)
            first_cell.append(time.perf_counter() - started)
    return {
        "worker_loop_s": round(worker_loop_s, 3),
        "plain_loop_over_file_lines_s": round(plain_file_s, 3),
        "worker_ratio": round(worker_loop_s / plain_file_s, 2),
        "layers_active": layers.get("active", []),
        "layers_missing": layers.get("missing", []),
        "startup_input_mb": round(size / (1 << 20), 1),
        "startup_lines": ready.get("n_lines"),
        "startup_median_s": round(statistics.median(times), 3),
        "startup_all_s": [round(t, 3) for t in times],
        "first_cell_len_lines_s": round(statistics.median(first_cell), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=2_500_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--startup-mb", type=int, default=200)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--skip-worker", action="store_true", help="only the in-process ratio")
    args = parser.parse_args()

    result = {"python": sys.version.split()[0], "loop": bench_loop(args.lines, args.repeat)}
    loop = result["loop"]
    print(
        f"guarded loop, {loop['lines']:,} lines, re.search per line: plain {loop['plain_s']} s, "
        f"guarded {loop['guarded_s']} s, ratio {loop['ratio']}x (goal <= 2.5x)"
    )
    if not args.skip_worker:
        with tempfile.TemporaryDirectory(prefix="rlm-bench-") as tmp:
            worker = bench_worker(args.lines, args.startup_mb, args.starts, Path(tmp))
        result["worker"] = worker
        print(
            f"same loop in the worker over a {args.lines:,}-line file: {worker['worker_loop_s']} s "
            f"vs plain over a list of its lines {worker['plain_loop_over_file_lines_s']} s ({worker['worker_ratio']}x)"
        )
        print(
            f"worker start-up, {worker['startup_input_mb']} MB input ({worker['startup_lines']:,} lines): "
            f"median {worker['startup_median_s']} s {worker['startup_all_s']}; "
            f"first cell len(context_lines) {worker['first_cell_len_lines_s']} s"
        )
        print(
            f"layers active: {', '.join(worker['layers_active'])}; missing: {worker['layers_missing'] or 'none'}"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
