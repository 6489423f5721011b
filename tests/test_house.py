"""The house rules, checked: the import contracts, the worker's lock-down imports, one trace schema.

The package arrows and the worker boundary are import-linter contracts in
pyproject.toml (docs/architecture.md says what each means); these tests run
them, and check that they catch a crossing import. What contracts cannot
say is checked here from the source (ast): code the locked-down worker runs
imports nothing at call time and nothing beyond the standard library and the
three libraries it loads before lock-down. The trace schema in code and its
documentation must not part ways.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlm.trace import schema

ROOT = Path(__file__).resolve().parent.parent
RLM = ROOT / "rlm"

# `lint-imports`, run by the interpreter running the tests (CI runs the same command after mypy).
LINT_IMPORTS = [
    sys.executable,
    "-c",
    "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())",
    "--no-cache",
    "--no-logo",
]

# Code the worker runs: the worker package and everything it reaches. Outside rlm it may
# import only these (all loaded before lock-down; the audit hook fails any later import).
WORKER_ENTRY = "rlm.sandbox.worker.main"
WORKER_THIRD_PARTY = {"numpy", "RestrictedPython", "duckdb"}
# The rlm modules it may reach: the worker package, worker-safe text, the lock-down.
WORKER_SAFE = ("rlm.sandbox.worker", "rlm.text")
WORKER_ALSO = {"rlm", "rlm.sandbox", "rlm.sandbox.oslimits"}
# Functions in worker-reachable modules that import inside their body, and why that is safe.
CALL_TIME_IMPORTS = {
    ("rlm.text.index", "_numpy"): "numpy is preloaded by the worker; the parent loads it lazily",
    ("rlm.sandbox.worker.sql_session", "__init__"): "the SQL session opens before lock-down, "
    "and only a worker whose input has a table imports duckdb",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in RLM.rglob("*.py")}


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


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the rlm package under `root`, with `root`'s pyproject.toml."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(LINT_IMPORTS, cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_the_import_contracts_hold() -> None:
    """The arrows, the worker boundary, the one door to litellm and the run's seams (pyproject.toml), kept."""
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout, done.stdout


def test_the_contracts_catch_an_import_across_the_architecture(tmp_path: Path) -> None:
    """A copy of the package with one crossing import per contract: each contract breaks and
    names the import, followed through the modules between (a worker module reaching the
    profile through a module of its own)."""
    shutil.copytree(RLM, tmp_path / "rlm", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    planted = {
        "rlm/sandbox/worker/planted_relay.py": "import rlm.sandbox.worker.planted_reach\n",
        "rlm/sandbox/worker/planted_reach.py": "import rlm.input.source\n",
        "rlm/model/planted_cli.py": "import rlm.cli.app\n",
        "rlm/text/planted_rich.py": "import rich\n",
        "rlm/replay/planted_litellm.py": "import litellm\n",
        "rlm/run/planted_engine.py": "import rlm.run.engine\n",
    }
    for name, text in planted.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    # A node reaching its engine: the node imports a module that imports the engine.
    with open(tmp_path / "rlm/run/node.py", "a", encoding="utf-8") as fh:
        fh.write("\nimport rlm.run.planted_engine  # noqa: E402\n")
    done = _lint_imports(tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "0 kept, 4 broken" in out, out
    assert "rlm.model is not allowed to import rlm.cli" in out, out
    assert "rlm.sandbox.worker.planted_reach -> rlm.input.source" in out, out
    assert "rlm.sandbox.worker is not allowed to import rlm.input" in out, out
    assert "rlm.text is not allowed to import rich" in out, out
    assert "rlm.replay.planted_litellm -> litellm" in out, out
    assert "rlm.run.node -> rlm.run.planted_engine" in out, out


def test_the_worker_imports_only_what_it_can_have_after_lock_down() -> None:
    """Contracts follow imports but cannot tell one made at call time (after lock-down no file
    can be opened, so it fails) from one made at load, nor say "only these libraries"."""
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
            if top == "rlm":
                if imported in modules:
                    todo.append(imported)
            elif top not in stdlib and top not in WORKER_THIRD_PARTY:
                wrong.append(f"{name} imports {imported}: not stdlib, numpy, RestrictedPython or duckdb")
    assert not wrong, "\n".join(wrong)
    outside = sorted(m for m in reached if not m.startswith(WORKER_SAFE) and m not in WORKER_ALSO)
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
