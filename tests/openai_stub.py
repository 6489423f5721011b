"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions API.

Tests point litellm at it (`openai/<name>` with `api_base`) so the whole
network path runs: HTTP, JSON, tool calls, errors. Replies use the same
shapes as the scripted provider (rlm/model/scripted.py): a string, or an object
with `content`, `tool` + `args` (or `raw_args`, the arguments text as sent),
`tool_calls`, `delay` (seconds before answering: a hang), `status` (an HTTP
error code to answer with) and `headers` (e.g. Retry-After). Faults:
`drip` (seconds between the bytes of the reply), `reset` (the connection is
reset half-way through the body), `raw` (this text as the body: malformed
JSON), `no_choices` (a reply with `"choices": []`). `default` may be a
function of the request number, for replies that must differ.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OpenAIStub:
    def __init__(self, replies: list[Any], default: Any = None) -> None:
        self.replies = list(replies)
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()  # ends hangs and drips when the test is over
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with stub._lock:
                    stub.requests.append(
                        {
                            "path": self.path,
                            "body": body,
                            "headers": dict(self.headers),
                            "at": time.monotonic(),
                        }
                    )
                    reply = stub.replies.pop(0) if stub.replies else stub.default
                    if callable(reply):
                        reply = reply(len(stub.requests))
                if reply is None:
                    self._json(
                        400, {"error": {"message": "stub has no reply left", "type": "invalid_request_error"}}
                    )
                    return
                if isinstance(reply, str):
                    reply = {"content": reply}
                if reply.get("delay"):
                    stub._stop.wait(float(reply["delay"]))
                if reply.get("status"):
                    self._json(
                        int(reply["status"]),
                        {"error": {"message": reply.get("message", "stub error")}},
                        reply.get("headers"),
                    )
                    return
                if "raw" in reply:
                    self._send(200, reply["raw"].encode(), None)
                    return
                payload = stub.completion(body, reply)
                if reply.get("no_choices"):
                    payload["choices"] = []
                data = json.dumps(payload).encode()
                if reply.get("reset"):
                    self._head(200, len(data), None)
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    # SO_LINGER 0: close with a TCP reset, not a clean end of stream.
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    self.close_connection = True
                    return
                if reply.get("drip"):
                    self._head(200, len(data), None)
                    try:
                        for i in range(len(data)):
                            self.wfile.write(data[i : i + 1])
                            self.wfile.flush()
                            if stub._stop.wait(float(reply["drip"])):
                                break
                    except OSError:  # the client gave up
                        pass
                    return
                self._send(200, data, None)

            def _head(self, status: int, length: int, headers: dict[str, str] | None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(length))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()

            def _send(self, status: int, data: bytes, headers: dict[str, str] | None) -> None:
                self._head(status, len(data), headers)
                try:
                    self.wfile.write(data)
                except OSError:
                    pass

            def _json(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                self._send(status, json.dumps(payload).encode(), headers)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def completion(self, body: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
        calls = list(reply.get("tool_calls") or [])
        if "tool" in reply:
            calls.insert(
                0, {"name": reply["tool"], "args": reply.get("args", {}), "raw": reply.get("raw_args")}
            )
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
        if calls:
            message["tool_calls"] = [
                {
                    "id": "call_" + uuid.uuid4().hex[:10],
                    "type": "function",
                    "function": {
                        "name": c["name"],
                        "arguments": c["raw"] if c.get("raw") is not None else json.dumps(c.get("args", {})),
                    },
                }
                for c in calls
            ]
        prompt_chars = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex[:10],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {
                "prompt_tokens": max(1, prompt_chars // 4),
                "completion_tokens": max(1, len(str(reply.get("content") or "")) // 4),
                "total_tokens": max(2, prompt_chars // 4 + 1),
            },
        }

    def __enter__(self) -> OpenAIStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
