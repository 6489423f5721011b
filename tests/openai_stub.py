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
function of the request number, for replies that must differ. `rules`
(`{"match": regex, "reply": template}`, as the scripted provider has them) are
tried first against the request's last message: the first that matches
answers, its groups expanded into the reply (`seen \\1`), and no scripted reply
is used.

The Batch API too (`/v1/files`, `/v1/files/{id}/content`, `/v1/batches`,
`/v1/batches/{id}`): an uploaded request file becomes a job that reports
`in_progress` for its first `batch_polls` looks, then runs each request line
through the reply logic above (rules, replies, default) and reports
`completed` (or `batch_ends`, e.g. "failed", when set) with an output file of
the results. Chat-completions requests are in `requests`; the jobs in
`batches`, the lines they ran in `batch_requests`.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
import uuid
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OpenAIStub:
    def __init__(
        self,
        replies: list[Any],
        default: Any = None,
        *,
        rules: list[dict[str, str]] | None = None,
        batch_polls: int = 0,
        batch_ends: str = "completed",
    ) -> None:
        self.replies = list(replies)
        self.default = default
        self.rules = list(rules or [])
        self.requests: list[dict[str, Any]] = []
        # The Batch API: uploaded files, jobs, and the request lines the jobs ran.
        self.batch_polls = batch_polls
        self.batch_ends = batch_ends
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.batch_requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()  # ends hangs and drips when the test is over
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                if "/files" in self.path or "/batches" in self.path:
                    status, payload = stub.batch_get(self.path.split("?")[0].rstrip("/"))
                    if isinstance(payload, bytes):
                        self._send(status, payload, None)
                    else:
                        self._json(status, payload)
                elif self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length)
                path = self.path.split("?")[0].rstrip("/")
                if path.endswith("/files"):
                    self._json(*stub.upload(str(self.headers.get("Content-Type") or ""), data))
                    return
                if path.endswith("/batches"):
                    self._json(*stub.create_batch(json.loads(data or b"{}")))
                    return
                body = json.loads(data or b"{}")
                with stub._lock:
                    stub.requests.append(
                        {
                            "path": self.path,
                            "body": body,
                            "headers": dict(self.headers),
                            "at": time.monotonic(),
                        }
                    )
                    reply = stub.reply_for(body, len(stub.requests))
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

    def reply_for(self, body: dict[str, Any], number: int) -> Any:
        """The reply to a request (the lock held): a rule's, else the next scripted one, else the default."""
        messages = body.get("messages") or [{}]
        last = str(messages[-1].get("content") or "")
        for rule in self.rules:
            found = re.search(rule["match"], last)
            if found:
                return found.expand(rule["reply"])
        reply = self.replies.pop(0) if self.replies else self.default
        return reply(number) if callable(reply) else reply

    # -- the Batch API ---------------------------------------------------------------
    def upload(self, content_type: str, data: bytes) -> tuple[int, dict[str, Any]]:
        """POST /v1/files: a multipart form with `purpose` and `file`."""
        form = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + data)
        fields = {part.get_param("name", header="content-disposition"): part for part in form.iter_parts()}
        if "file" not in fields:
            return 400, {"error": {"message": "no file in the form"}}
        content = fields["file"].get_payload(decode=True) or b""
        purpose = fields["purpose"].get_payload(decode=True).decode() if "purpose" in fields else "batch"
        with self._lock:
            file_id = "file-" + uuid.uuid4().hex[:12]
            self.files[file_id] = content
        return 200, self._file(file_id, purpose)

    def _file(self, file_id: str, purpose: str = "batch") -> dict[str, Any]:
        return {
            "id": file_id,
            "object": "file",
            "bytes": len(self.files[file_id]),
            "created_at": int(time.time()),
            "filename": f"{file_id}.jsonl",
            "purpose": purpose,
            "status": "processed",
        }

    def create_batch(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """POST /v1/batches: a job over an uploaded file, validating at first."""
        with self._lock:
            file_id = body.get("input_file_id")
            if file_id not in self.files:
                return 404, {"error": {"message": f"no file {file_id}"}}
            lines = [json.loads(line) for line in self.files[file_id].splitlines() if line.strip()]
            batch_id = "batch_" + uuid.uuid4().hex[:12]
            self.batches[batch_id] = {
                "id": batch_id,
                "object": "batch",
                "endpoint": body.get("endpoint"),
                "completion_window": body.get("completion_window"),
                "input_file_id": file_id,
                "status": "validating",
                "created_at": int(time.time()),
                "metadata": body.get("metadata"),
                "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
                "output_file_id": None,
                "error_file_id": None,
                "polls": 0,
                "lines": lines,
            }
            return 200, self._batch(batch_id)

    def _batch(self, batch_id: str) -> dict[str, Any]:
        return {k: v for k, v in self.batches[batch_id].items() if k not in ("polls", "lines")}

    def batch_get(self, path: str) -> tuple[int, dict[str, Any] | bytes]:
        """GET /v1/batches (the latest job), /v1/batches/{id} (one look: the job may move on),
        /v1/files/{id}/content."""
        with self._lock:
            parts = path.split("/")
            if parts[-1] == "batches":
                latest = [self._batch(b) for b in list(self.batches)[-1:]]
                return 200, {"object": "list", "data": latest, "has_more": False}
            if parts[-1] == "content" and parts[-2] in self.files:
                return 200, self.files[parts[-2]]
            if parts[-2] == "files" and parts[-1] in self.files:
                return 200, self._file(parts[-1])
            if parts[-2] == "batches" and parts[-1] in self.batches:
                job = self.batches[parts[-1]]
                job["polls"] += 1
                if job["status"] in ("validating", "in_progress"):
                    if job["polls"] > self.batch_polls:
                        self._run_batch(job)
                    else:
                        job["status"] = "in_progress"
                return 200, self._batch(parts[-1])
            return 404, {"error": {"message": f"not found: {path}"}}

    def _run_batch(self, job: dict[str, Any]) -> None:
        """Each request line through the reply logic; the results as the job's output file."""
        if self.batch_ends != "completed":
            job["status"] = self.batch_ends
            job["errors"] = {
                "object": "list",
                "data": [{"code": "stub", "message": f"the stub's job {self.batch_ends}"}],
            }
            return
        out = []
        for line in job["lines"]:
            body = line["body"]
            self.batch_requests.append({"custom_id": line["custom_id"], "body": body})
            reply = self.reply_for(body, len(self.requests) + len(self.batch_requests))
            if isinstance(reply, str):
                reply = {"content": reply}
            if reply is None or reply.get("status"):
                status = int(reply.get("status", 400)) if reply else 400
                message = reply.get("message", "stub error") if reply else "stub has no reply left"
                response = {"status_code": status, "body": {"error": {"message": message}}}
                job["request_counts"]["failed"] += 1
            else:
                response = {
                    "status_code": 200,
                    "request_id": uuid.uuid4().hex[:8],
                    "body": self.completion(body, reply),
                }
                job["request_counts"]["completed"] += 1
            out.append(
                {
                    "id": "batch_req_" + uuid.uuid4().hex[:8],
                    "custom_id": line["custom_id"],
                    "response": response,
                    "error": None,
                }
            )
        output_id = "file-" + uuid.uuid4().hex[:12]
        self.files[output_id] = "".join(json.dumps(o) + "\n" for o in out).encode()
        job["output_file_id"] = output_id
        job["status"] = "completed"

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
