"""Serve a GGUF with the prebuilt llama.cpp server of the `xllamacpp` wheel, until killed.

Run as a child by `rlm.local.server` (never imported by the CLI process):

    python -m rlm.local.xserve --model M.gguf --alias local --port 8123 --n-ctx 4096 --threads 2

The server is llama.cpp's own `llama-server`, compiled into the wheel; it
listens on 127.0.0.1 only and speaks the OpenAI chat API under `/v1`.
SIGTERM or SIGINT ends the process (the parent stops its whole process group).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlm.local.xserve", description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--alias", default="local")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_ctx = args.n_ctx
    params.n_parallel = 1  # one slot: the whole context for the one conversation at a time
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.ui = False  # no web page: an API on loopback only

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = xllamacpp.Server(params)  # starts listening; /v1/models answers 2xx once the model is loaded
    print(f"rlm.local.xserve: xllamacpp {xllamacpp.__version__} on {server.listening_address}", flush=True)
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
