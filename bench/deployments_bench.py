"""A fan-out through one deployment and through two (`[[model_list]]`, litellm's Router).

64 chunks of a partition_map; each sub-call goes to an OpenAI-style server on 127.0.0.1 that
answers in `--latency` seconds and serves at most `--capacity` requests at once (a GPU server's
batch, or an API key's concurrency): the rest wait their turn at the server. With
`--concurrency` at least capacity x deployments, the ideal wall time of the fan-out is
ceil(chunks / (capacity x deployments)) x latency. Timed: the partition_map step, as the trace
records it (its duration less the root model's own call), medians of `--repeats`.

    python bench/deployments_bench.py [--chunks 64] [--latency 0.5] [--capacity 4] [--concurrency 16]
                                      [--repeats 3] [--deployments 1,2] [--dask 2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from fanout_bench import hdfs_log  # the same input as the one-deployment fan-out bench

ROOT = Path(__file__).resolve().parent.parent


class SlowServer:
    """An OpenAI-style chat server whose every reply is "3", `latency` s after its turn comes."""

    def __init__(self, latency: float, capacity: int) -> None:
        seats = threading.Semaphore(capacity)
        self.served = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with seats:
                    time.sleep(latency)
                server.served += 1
                body = json.dumps(
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "bench",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": "3"},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 1, "total_tokens": 101},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = self
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}/v1"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def one_run(
    workdir: Path, servers: list[SlowServer], chunks: int, concurrency: int, executor: str = "local"
) -> float:
    from rlm.run.settings import load_settings
    from rlm.run.wiring import run_ask

    per_chunk = 30
    source = hdfs_log(workdir, chunks, per_chunk)
    config = workdir / "config.toml"
    config.write_text(
        "".join(
            f'[[model_list]]\nmodel_name = "team"\nlitellm_params = {{ model = "openai/bench", '
            f'api_base = "{s.api_base}", api_key = "sk-bench" }}\n'
            for s in servers
        )
    )
    os.environ["RLM_CONFIG"] = str(config)
    script = Path(tempfile.mkstemp(suffix=".json", dir=workdir)[1])
    script.write_text(
        json.dumps(
            [
                {"tool": "partition_map", "args": {"question": "count", "chunk_lines": per_chunk}},
                {"tool": "final", "args": {"answer": "done"}},
                "done",
            ]
        )
    )
    settings = load_settings(
        {
            "model": f"scripted/{script}",
            "sub_model": "team",
            "concurrency": concurrency,
            "trace_dir": str(workdir / "traces"),
            "no_memory": True,
            "executor": executor,
        }
    )
    result = run_ask(settings, str(source), "how many blocks per chunk?")
    trace = json.loads(Path(result.trace_path).read_text())
    if not trace["steps"]:
        raise SystemExit(f"the run failed: {result.message}")
    step = trace["steps"][0]
    assert step["observation"]["preview"].startswith(f"{chunks} chunks"), step["observation"]["preview"][:80]
    return float(step["duration_s"] - step["model_call"]["latency_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--capacity", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--deployments", default="1,2", help="how many deployments, each count in turn")
    ap.add_argument(
        "--dask",
        type=int,
        default=0,
        help="also through --executor dask:// on a LocalCluster of this many worker processes "
        "(the last deployment count)",
    )
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    print(
        f"{args.chunks} chunks, {args.latency:g} s a reply, {args.capacity} at once per deployment, "
        f"--concurrency {args.concurrency}"
    )
    print("| deployments | executor | ideal s | median s (min-max) | x ideal |")
    print("|---|---|---|---|---|")
    counts = [int(n) for n in args.deployments.split(",")]
    runs = [(count, "local") for count in counts] + ([(counts[-1], "dask")] if args.dask else [])
    for count, executor in runs:
        servers = [SlowServer(args.latency, args.capacity) for _ in range(count)]
        times = []
        cluster = None
        try:
            address = "local"
            if executor == "dask":
                from distributed import LocalCluster

                cluster = LocalCluster(
                    n_workers=args.dask,
                    threads_per_worker=math.ceil(args.concurrency / args.dask),
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                )
                address = cluster.scheduler_address.replace("tcp://", "dask://")
            for _ in range(args.repeats):
                with tempfile.TemporaryDirectory() as tmp:
                    times.append(one_run(Path(tmp), servers, args.chunks, args.concurrency, address))
        finally:
            for s in servers:
                s.close()
            if cluster is not None:
                cluster.close()
        seats = min(args.capacity * count, args.concurrency)
        ideal = math.ceil(args.chunks / seats) * args.latency
        median = statistics.median(times)
        ratio = f"{median / ideal:.2f}" if ideal else "-"  # --latency 0: the parent's own cost alone
        shown = f"dask, {args.dask} workers" if executor == "dask" else "local"
        print(
            f"| {count} | {shown} | {ideal:.1f} | {median:.2f} ({min(times):.2f}-{max(times):.2f}) | {ratio} |"
        )


if __name__ == "__main__":
    main()
