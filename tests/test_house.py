"""The house rules, checked: package arrows, the worker's import boundary, one trace schema.

These read the source (ast) and docs/trace-format.md; they fail when a module
starts importing across the architecture, when code that runs in the
locked-down worker imports something it cannot have there, or when the trace
schema in code and its documentation part ways.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from rlm.trace import schema

ROOT = Path(__file__).resolve().parent.parent
RLM = ROOT / "rlm"

# Which package may import which (the arrows point one way: cli -> run -> model ... -> text).
ALLOWED = {
    "cli": {"run", "replay", "trace", "local", "model", "input", "text", "memory", "errors", "version"},
    "replay": {"run", "trace", "sandbox", "input", "text", "errors"},
    "run": {"model", "sandbox", "sandbox.worker", "input", "text", "trace", "local", "memory", "errors"},
    "memory": {"errors"},
    "model": {"errors"},
    "local": {"errors"},
    "sandbox": {"text", "errors", "version"},
    "sandbox.worker": {"sandbox", "text", "input"},
    "input": {"text", "errors"},
    "trace": {"errors", "version"},
    "text": set(),
    "errors": set(),
}
# rlm.privatefiles (0600 files in 0700 folders, written whole, never through a symlink) imports
# nothing of rlm: every package may import it.
for _deps in ALLOWED.values():
    _deps.add("privatefiles")
ALLOWED["privatefiles"] = set()

# Code the worker runs: the worker package and everything it reaches. Outside rlm it may
# import only these (all loaded before lock-down; the audit hook fails any later import).
WORKER_ENTRY = "rlm.sandbox.worker.main"
WORKER_THIRD_PARTY = {"numpy", "RestrictedPython", "duckdb"}
# Functions in worker-reachable modules that import inside their body, and why that is safe.
CALL_TIME_IMPORTS = {
    ("rlm.sandbox.worker.main", "_preload"): "the preload itself, before lock-down",
    ("rlm.sandbox.worker.main", "_die_with_parent"): "at start-up, before lock-down",
    ("rlm.sandbox.worker.main", "__init__"): "the worker's set-up, before lock-down",
    ("rlm.sandbox.worker.policy", "_re_attrs"): "builds the policy tables at start-up",
    ("rlm.sandbox.worker.policy", "_make_builtins"): "builds the builtins at start-up",
    ("rlm.text.index", "_numpy"): "numpy is preloaded by the worker; the parent loads it lazily",
    ("rlm.input.tables", "__init__"): "the SQL session opens before lock-down",
    # Parent-only functions of rlm.input.tables (the table build): never called in the worker.
    ("rlm.input.tables", "ensure_table"): "parent only",
    ("rlm.input.tables", "_unreadable_db"): "parent only (a cached table checked before use)",
    ("rlm.input.tables", "build_table"): "parent only",
    ("rlm.input.tables", "_stop_if_asked"): "parent only (the table build)",
    ("rlm.input.tables", "_create_csv"): "parent only",
    ("rlm.input.tables", "_utc"): "parent only (the build's connection)",
    ("rlm.input.tables", "_has_cr"): "parent only",
    ("rlm.input.tables", "_transcode"): "parent only",
    ("rlm.input.tables", "_what_columns_hold"): "parent only (the profile's values, examples)",
    ("rlm.input.tables", "describe_table"): "parent only (the profile's text)",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in RLM.rglob("*.py")}


def _package(module: str) -> str:
    parts = module.split(".")
    if module == "rlm":
        return "version"
    if parts[1:3] == ["sandbox", "worker"]:
        return "sandbox.worker"
    return parts[1]


def _imports(path: Path) -> list[tuple[str, str | None]]:
    """(imported module, enclosing function or None) for every import in the file."""
    found: list[tuple[str, str | None]] = []

    def visit(node: ast.AST, func: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else func
            if isinstance(child, ast.Import):
                found.extend((a.name, func) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                found.append((child.module, func))
                # `from rlm.text import textfile` imports the submodule
                found.extend((f"{child.module}.{a.name}", func) for a in child.names)
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), None)
    return found


def test_packages_import_only_along_the_arrows() -> None:
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        if name in ("rlm", "rlm.__main__"):
            continue
        here = _package(name)
        for imported, _ in _imports(path):
            if not imported.startswith("rlm") or imported not in modules and imported != "rlm":
                continue
            there = _package(imported)
            if there != here and there not in ALLOWED[here]:
                wrong.append(f"{name} imports {imported} ({here} -> {there})")
    assert not wrong, "\n".join(wrong)


def test_the_package_graph_has_no_cycles() -> None:
    graph = {pkg: {d for d in deps if d in ALLOWED} for pkg, deps in ALLOWED.items()}
    state: dict[str, int] = {}

    def visit(pkg: str, path: list[str]) -> None:
        if state.get(pkg) == 1:
            pytest.fail("import cycle: " + " -> ".join([*path, pkg]))
        if state.get(pkg) == 2:
            return
        state[pkg] = 1
        for dep in graph[pkg]:
            visit(dep, [*path, pkg])
        state[pkg] = 2

    for pkg in graph:
        visit(pkg, [])


def test_the_worker_imports_only_what_it_can_have_after_lock_down() -> None:
    modules = _modules()
    stdlib = set(sys.stdlib_module_names)
    reached, todo, wrong = set(), [WORKER_ENTRY], []
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        for imported, func in _imports(modules[name]):
            top = imported.split(".")[0]
            if func is not None and (name, func) not in CALL_TIME_IMPORTS:
                wrong.append(f"{name}.{func} imports {imported} at call time")
            if func is not None and CALL_TIME_IMPORTS.get((name, func), "").startswith("parent only"):
                continue  # never called in the worker: what it imports is the parent's
            if top == "rlm":
                if imported in modules:
                    todo.append(imported)
            elif top not in stdlib and top not in WORKER_THIRD_PARTY:
                wrong.append(f"{name} imports {imported}: not stdlib, numpy, RestrictedPython or duckdb")
    assert not wrong, "\n".join(wrong)
    # The boundary is what the package docstrings say it is.
    outside = sorted(
        m
        for m in reached
        if not m.startswith(("rlm.text", "rlm.sandbox.worker"))
        and m not in ("rlm.sandbox.oslimits", "rlm.input.tables", "rlm.input.logformats", "rlm.sandbox")
        and m not in ("rlm", "rlm.input", "rlm.privatefiles")
    )
    assert not outside, f"the worker reaches parent-side modules: {outside}"


# -- the trace schema and its documentation ---------------------------------------------------

DOC = ROOT / "docs" / "trace-format.md"


def _sections() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.M)
    return {p.split("\n", 1)[0].strip(): p for p in parts[1:]}


def _table_fields(section: str) -> set[str]:
    """The names in the first column of a section's table, `a.b` kept dotted; in a cell that
    starts with `x.y`, the undotted names after it belong to `x` too."""
    names: set[str] = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cell = line.split("|")[1]
        prefix = ""
        for name in re.findall(r"`([\w.]+)`", cell):
            if "." in name:
                prefix = name.rsplit(".", 1)[0] + "."
                names.add(name)
            else:
                names.add(prefix + name)
    return names


def _keys(record: type) -> set[str]:
    return set(record.__annotations__)


def test_the_documented_top_level_node_and_step_fields_are_the_schema() -> None:
    sections = _sections()
    assert _table_fields(sections["Top level"].split("### Status")[0]) == _keys(schema.TraceDoc)
    assert _table_fields(sections["node"]) == _keys(schema.NodeRecord)
    step = _table_fields(sections["step"])
    model_call = {n.split(".", 1)[1] for n in step if n.startswith("model_call.")}
    assert {n.split(".", 1)[0] for n in step} == _keys(schema.StepRecord)
    assert model_call == _keys(schema.ModelCallRecord)


def test_the_documented_records_name_every_schema_field() -> None:
    sections = _sections()
    events = sections["provider event"]
    missing = [k for k in _keys(schema.ProviderEventRecord) if f"`{k}`" not in events]
    assert not missing, f"provider event fields missing from the docs: {missing}"
    bullets = sections["subcall, bridge call, finding, synthesis"]
    for title in ("subcall", "bridge call", "finding", "synthesis"):
        bullet = re.search(rf"^- \*\*{title}\*\*:(.*?)(?=^- \*\*|\Z)", bullets, flags=re.M | re.S)
        assert bullet, title
        record = schema.RECORDS[title]
        missing = [k for k in _keys(record) if f"`{k}`" not in bullet.group(1)]
        assert not missing, f"{title} fields missing from the docs: {missing}"


def test_the_documented_statuses_are_the_schema_statuses() -> None:
    status = _sections()["Top level"].split("### Status", 1)[1]
    documented = set(re.findall(r"^\| `(\w+)` \|", status, flags=re.M))
    assert documented == set(schema.RunStatus.__args__)  # type: ignore[attr-defined]


def test_a_trace_of_the_wrong_shape_names_its_first_problem(tmp_path: Path) -> None:
    from rlm.errors import InputError
    from rlm.trace.reader import read_trace

    bad = tmp_path / "t.json"
    bad.write_text(
        '{"schema": "rlm-trace/1", "nodes": [{"id": "n0"}], "steps": [{"node": "n0", "index": "1"}]}'
    )
    with pytest.raises(InputError, match=r"trace.steps\[0\].index is not an integer"):
        read_trace(bad)
    bad.write_text('{"schema": "rlm-trace/1", "status": "final", "synthesis": {"citations": "F1"}}')
    with pytest.raises(InputError, match=r"trace.synthesis.citations is not a list"):
        read_trace(bad)
    # A status this version does not know is read (a later version may add one) but never written.
    bad.write_text('{"schema": "rlm-trace/1", "status": "paused"}')
    assert read_trace(bad)["status"] == "paused"
    assert schema.problems({"schema": "rlm-trace/1", "status": "paused"}, strict=True)
