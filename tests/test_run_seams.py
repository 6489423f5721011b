"""The seams of a run (rlm.run): the step a sub-call is recorded at, the engine's services as a
node sees them, and the import graph of the package.

A sub-call made by code in the worker belongs to the step whose cell made it, even after the
node dropped old turns for room; `rlm replay --verify` serves recorded sub-calls by that step,
so a wrong number makes a faithful trace fail its own verification.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from conftest import FIXTURES, ROOT, run_cli, write_script

from rlm.input.source import open_source
from rlm.model.budget import Budget
from rlm.model.client import ModelClient, Reply
from rlm.run.events import Event
from rlm.run.host import Bridge, Partition, StepDone
from rlm.run.ledger import FINDING_CHARS, Finding, Ledger
from rlm.run.node import Node
from rlm.run.scope import Asker, NodeScope
from rlm.run.settings import Settings
from rlm.run.workers import worker_spec_for
from rlm.sandbox.client import Sandbox, WorkerSpec
from rlm.trace.schema import BridgeCallRecord, FindingKind

ACCESS = FIXTURES / "access.log"
RUN_PACKAGE = ROOT / "rlm" / "run"

# Six cells that each print 3,000 characters: with a small history they push the oldest turns
# out of the prompt, so by the seventh step the node holds fewer turns than it has taken.
WIDE_CELLS = [f"print({ch!r} * 3000)" for ch in "abcdef"]
SUB_CELL = "r = llm_query('what is on line 1?', start_line=1, end_line=2)\nprint(r)"
SUB_ANSWER = "Line 1 is a GET request for the home page."


def _replies() -> list[Any]:
    replies: list[Any] = [{"tool": "execute", "args": {"code": code}} for code in WIDE_CELLS]
    replies += [
        {"tool": "execute", "args": {"code": SUB_CELL}},
        SUB_ANSWER,  # the helper model's answer to the cell's llm_query
        {"tool": "final", "args": {"answer": "a GET request"}},
        json.dumps({"answer": "a GET request", "explanation": "From the sub-call.", "citations": []}),
    ]
    return replies


def _latest_trace(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    paths = sorted((tmp_path / "traces").glob("*.json"), key=lambda p: p.stat().st_mtime)
    assert paths, "no trace written"
    return paths[-1], json.loads(paths[-1].read_text())


def test_a_sub_call_from_code_is_recorded_at_its_step_after_turns_were_dropped(tmp_path: Path) -> None:
    model = write_script(tmp_path / "script.json", {"replies": _replies()})
    proc = run_cli(
        ["ask", str(ACCESS), "What is on line 1?", "-m", model],
        cwd=tmp_path,
        env={"RLM_HISTORY_TOKENS": "600"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "a GET request\n"
    path, trace = _latest_trace(tmp_path)
    # What a user sees: the trace of a faithful run verifies.
    verify = run_cli(["replay", str(path), "--verify"], cwd=tmp_path)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "All re-run steps match." in verify.stdout

    steps = {s["index"]: s for s in trace["steps"] if s["node"] == "n0"}
    cell = next(i for i, s in steps.items() if "llm_query" in str((s["action"] or {}).get("args")))
    assert cell == 7
    # The premise: by then the node had dropped turns, so counting its turns misses the step.
    assert steps[cell]["model_call"]["dropped_turns"] > 0
    (bridge,) = [c for c in trace["bridge_calls"] if c["name"] == "llm_query"]
    assert (bridge["node"], bridge["step"]) == ("n0", cell)
    (sub,) = trace["subcalls"]
    assert (sub["node"], sub["step"], sub["answer"]) == ("n0", cell, SUB_ANSWER)
    (finding,) = [f for f in trace["ledger"] if f["kind"] == "subcall"]
    assert finding["evidence"] == f"n0.s{cell}" and finding["node"] == "n0"
    # The ledger as the trace keeps it: the same fields as before, no new ones.
    assert set(finding) == {"id", "kind", "text", "evidence", "node", "full", "topic", "superseded_by"}
    # A finding made in a turn still in view is not repeated in the digest of dropped turns.
    context = steps[cell + 1]["model_call"]["context"]
    assert f"T{cell}" in context["included"] and finding["id"] not in context["included"]


def test_a_child_started_from_code_names_the_step_that_started_it(tmp_path: Path) -> None:
    # A slice too big for one sub-call becomes a child investigation; its parent_step is the
    # step of the cell that asked, not one past the turns the parent still holds.
    replies: list[Any] = [{"tool": "execute", "args": {"code": code}} for code in WIDE_CELLS]
    replies += [
        {
            "tool": "execute",
            "args": {"code": "r = llm_query('CHILD-Q: which IPs?', start_line=1, end_line=120)"},
        },
        {"tool": "peek", "args": {"start": 1, "length": 3}},  # the child's first turn
        {"tool": "final", "args": {"answer": "a few"}},
        json.dumps({"answer": "a few IPs", "explanation": "Seen.", "citations": []}),  # the child's synthesis
        {"tool": "final", "args": {"answer": "a few IPs"}},
        json.dumps({"answer": "a few IPs", "explanation": "From the child.", "citations": []}),
    ]
    model = write_script(tmp_path / "script.json", {"replies": replies})
    proc = run_cli(
        ["ask", str(ACCESS), "Which client IPs?", "-m", model],
        cwd=tmp_path,
        env={"RLM_HISTORY_TOKENS": "600", "RLM_SUB_PROMPT_TOKENS": "300"},
    )
    assert proc.returncode == 0, proc.stderr
    _, trace = _latest_trace(tmp_path)
    (child,) = [n for n in trace["nodes"] if n["id"] != "n0"]
    assert (child["parent"], child["parent_step"]) == ("n0", 7)
    (bridge,) = [c for c in trace["bridge_calls"] if c["name"] == "llm_query"]
    assert bridge["step"] == 7


class OwnHost:
    """A run of the test's own around one node: the real worker and the scripted model, its own
    ledger and budget, and sub-calls answered with the step they were asked at."""

    def __init__(self, settings: Settings, model: ModelClient, table: dict[str, Any] | None) -> None:
        self.settings = settings
        self.budget = Budget(max_calls=50, max_tokens=1_000_000)
        self.table = table
        self.cell_seconds = 30.0
        self.model = model
        self.ledger = Ledger()
        self.steps: list[StepDone] = []
        self.bridge_calls: list[BridgeCallRecord] = []
        self.asked: list[Asker] = []

    def model_for(self, depth: int) -> ModelClient:
        return self.model

    def protocol_for(self, model: ModelClient) -> str:
        return "tools"

    def progress(self, event: Event, /) -> None:
        pass

    def charge(self, node_id: str, reply: Reply) -> None:
        self.budget.charge(reply.prompt_tokens, reply.completion_tokens, reply.cost)

    def findings_of(self, node_id: str) -> list[Finding]:
        return self.ledger.for_node(node_id)

    def all_findings(self) -> list[Finding]:
        return self.ledger.entries

    def memories(self) -> list[Finding]:
        return []

    def add_finding(
        self,
        text: str,
        kind: FindingKind,
        node_id: str,
        step: int,
        *,
        topic: str | None = None,
        cap: int = FINDING_CHARS,
        code: str | None = None,
    ) -> Finding | None:
        return self.ledger.add(
            text, kind=kind, evidence=f"{node_id}.s{step}", node=node_id, step=step, topic=topic, code=code
        )

    def note_restart(self, node_id: str, why: str) -> None:
        raise AssertionError(f"the worker restarted: {why}")

    def report_internal(self, node_id: str, message: str) -> None:
        raise AssertionError(message)

    def launch_sandbox(self, spec: WorkerSpec, bridge: Bridge) -> Sandbox:
        sandbox = Sandbox(spec, bridge=bridge)
        sandbox.launch()
        return sandbox

    def sandbox_ready(self, sandbox: Sandbox) -> None:
        sandbox.wait_ready()

    def record_step(self, done: StepDone) -> None:
        self.steps.append(done)

    def record_bridge_call(self, record: BridgeCallRecord) -> None:
        self.bridge_calls.append(record)

    def llm_query(self, asker: Asker, args: dict[str, Any]) -> str:
        self.asked.append(asker)
        return f"asked at step {asker.step}"

    def partition_map(self, asker: Asker, args: dict[str, Any]) -> Partition:
        self.asked.append(asker)
        return Partition(["lines 1-2"], [f"asked at step {asker.step}"])


def test_a_node_runs_under_a_host_of_its_own_and_names_each_sub_calls_step(tmp_path: Path) -> None:
    # The node knows its run only as a NodeHost: driven here without the engine, over the real
    # worker and the scripted model, its sub-calls from code still name the step that made them.
    cache = tmp_path / "cache"
    profile = open_source(str(ACCESS), cache_dir=str(cache)).profile
    profile.digest.result()
    for p in [cache, *cache.rglob("*")]:  # the worker drops root: it must read the index as nobody
        p.chmod(0o755 if p.is_dir() else 0o644)
    settings = Settings(history_tokens=600)
    script = write_script(tmp_path / "script.json", [r for r in _replies() if isinstance(r, dict)])
    host = OwnHost(settings, ModelClient(script), profile.table)
    scope = NodeScope(
        spec=worker_spec_for(profile, settings),
        profile_block=profile.prompt_block(),
        n_lines=profile.lines,
    )
    result = Node(host, "n0", 0, "What is on line 1?", scope).run()

    assert (result.stop, result.steps, result.draft) == ("final", 8, "a GET request")
    assert [s.step for s in host.steps] == list(range(1, 9))
    assert host.steps[6].dropped_turns > 0  # turns were dropped before the cell that asked
    assert [(a.node_id, a.step) for a in host.asked] == [("n0", 7)]
    assert [(c["name"], c["step"], c.get("result")) for c in host.bridge_calls] == [
        ("llm_query", 7, "asked at step 7")
    ]
    assert "asked at step 7" in host.steps[6].outcome.observation
    results = [f for f in host.ledger.entries if f.kind == "result"]
    assert [f.step for f in results] == list(range(1, 8)) and all(f.node == "n0" for f in results)


def _imports_of(path: Path) -> set[str]:
    """The rlm modules a file imports, under TYPE_CHECKING included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "rlm.run":
                found.update(f"rlm.run.{a.name}" for a in node.names)
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m.startswith("rlm.")}


def test_the_run_package_has_no_import_cycle_and_never_imports_the_cli() -> None:
    modules = {f"rlm.run.{p.stem}": _imports_of(p) for p in RUN_PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert not [m for m, deps in modules.items() if any(d.startswith("rlm.cli") for d in deps)]
    graph = {m: {d for d in deps if d in modules} for m, deps in modules.items()}
    # The node is read and tested alone: it knows the run only as the host it is given.
    assert "rlm.run.engine" not in graph["rlm.run.node"]
    assert "rlm.run.subcalls" not in graph["rlm.run.node"]

    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph[module]):
            assert state.get(dep) != 1, "import cycle: " + " -> ".join([*path, module, dep])
            if dep not in state:
                visit(dep, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
