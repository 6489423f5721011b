"""The typed protocol's grammar path against the real llama.cpp server and the real local model.

`--protocol typed` sends the action schema built from the input's table as the reply's
`response_format`; llama.cpp's server turns it into a grammar the model's reply cannot
leave. These tests hold that: the real server, asked even to answer in prose, replies with
JSON the schema accepts, naming only the table's columns, and rlm compiles it to a query;
and `rlm ask -m local` acts in typed actions by default, end to end through the CLI.

Selected with `pytest -m realmodel` (needs `rlm local setup`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from rlm.input.source import open_source
from rlm.local import installed_gguf, local_server
from rlm.local.server import installed_backend
from rlm.model.client import ModelClient
from rlm.run.actions import Action
from rlm.run.typed import action_schema, describe_actions, to_action

pytestmark = pytest.mark.realmodel

ROOT = Path(__file__).resolve().parents[2]
FILES = {
    "apache": ROOT / "fixtures" / "access.log",
    "csv": ROOT / "fixtures" / "data" / "seaborn" / "taxis.csv",
    "jsonl": ROOT / "fixtures" / "data" / "elastic" / "nginxplus_json_logs",
}
RLM = Path(sys.executable).with_name("rlm")


@pytest.fixture(scope="module")
def model() -> Iterator[ModelClient]:
    """A client of the real local model, served by llama.cpp for the module's tests."""
    gguf = installed_gguf()
    if installed_backend() is None or gguf is None:
        pytest.skip("the local model is not set up: run `rlm local setup`")
    with local_server(gguf) as endpoint:
        yield ModelClient(
            endpoint.model, api_base=endpoint.api_base, request_timeout=600, context_window=endpoint.n_ctx
        )


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    cache = tmp_path_factory.mktemp("typed-grammar-cache")
    out = {}
    for name, path in FILES.items():
        table = open_source(str(path), cache_dir=str(cache)).profile.table
        assert table is not None, f"no table was built for {path}"
        out[name] = table
    return out


def _column_names(table: dict[str, Any]) -> set[str]:
    return {name for name, _ in table["columns"]}


def _named_columns(action: dict[str, Any]) -> set[str]:
    """Every column an action names, wherever it names one."""
    named = {action[k] for k in ("column", "by", "order_by") if isinstance(action.get(k), str)}
    named |= set(action.get("columns") or [])
    named |= {f["column"] for f in action.get("where") or [] if isinstance(f, dict)}
    return named


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", list(FILES))
def test_the_server_holds_the_reply_to_the_tables_schema_even_when_asked_for_prose(
    model: ModelClient, tables: dict[str, dict[str, Any]], name: str
) -> None:
    table = tables[name]
    schema = action_schema(table)
    # The prompt pulls the other way on purpose: without the grammar this model answers in words.
    messages = [
        {"role": "system", "content": describe_actions(table)},
        {
            "role": "user",
            "content": "Ignore any format. Write two friendly sentences of prose about what this file "
            "might contain and which country most of it comes from. Do not write JSON.",
        },
    ]
    reply = model.complete(messages, tools=None, max_tokens=200, schema=schema)
    parsed = json.loads(reply.content)  # the grammar admits nothing but one JSON value
    errors = [e.message for e in Draft202012Validator(schema).iter_errors(parsed)]
    assert not errors, f"{reply.content!r}: {errors}"
    assert _named_columns(parsed) <= _column_names(table) | {"line_no", "line"}
    assert isinstance(to_action(reply.content, table), Action)


@pytest.mark.timeout(1800)
def test_rlm_ask_with_the_local_model_acts_in_typed_actions_by_default(tmp_path: Path) -> None:
    if installed_backend() is None or installed_gguf() is None:
        pytest.skip("the local model is not set up: run `rlm local setup`")
    log = FILES["apache"]
    truth = sum(1 for line in log.read_text().splitlines() if '" 404 ' in line)
    proc = subprocess.run(
        [str(RLM), "ask", str(log), "How many requests got the status code 404?", "-m", "local"]
        + ["--json", "--trace-dir", str(tmp_path)],  # default settings: `--protocol auto`
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    trace = json.loads(Path(doc["trace"]).read_text())
    steps = trace["steps"]
    assert trace["nodes"][0]["protocol"] == "typed"
    # Each turn's reply was an action the table's schema admits: none came back as unreadable.
    assert steps and all(s["action"] is not None for s in steps), [s.get("observation") for s in steps]
    queries = [s["action"]["args"]["code"] for s in steps if s["action"]["name"] == "execute"]
    assert any("FROM log" in q for q in queries), queries
    assert doc["answer"].strip() == str(truth)
