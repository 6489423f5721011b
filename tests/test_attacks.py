"""The attack battery: real escape techniques, driven through the real worker
(rlm.sandbox.client) so that the parent-side kill and restart are exercised.

For every attack: nothing escapes (a secret file readable by the worker's uid
never shows up, no marker file is created, no TCP connection reaches a
listener on 127.0.0.1), the worker answers with an error or is killed and
restarted where it must be, and the next cell runs. Each entry's comment
names where the technique comes from.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import exec_cell, product_worker

from rlm.sandbox.client import Sandbox

CPU_SECONDS = 1.0
WALL_SECONDS = 8.0
N_LINES = 50

REFUSED = "refused"  # the cell reports an error; the worker keeps its state
CONTAINED = "contained"  # an error, or the worker is killed and restarted
LOST = "lost"  # the worker must be killed (and restarted)
RUNS = "runs"  # allowed to run; `after` checks that nothing was poisoned


@dataclass(frozen=True)
class Attack:
    name: str
    group: str
    code: str
    expect: str
    says: str | None = None  # a phrase the error must contain
    after: tuple[str, str] | None = None  # (code, exact output) checked in the next cell


INTACT = (
    "print(len(context_lines), context_lines[0], peek(1, 1).splitlines()[-1].strip(), len(context))",
    f"{N_LINES} row 1 alpha 1| row 1 alpha {sum(len(f'row {i} alpha') + 1 for i in range(1, N_LINES + 1))}\n",
)

ATTACKS: list[Attack] = [
    # ---------------------------------------------------------------- imports
    # LangChain LLMMathChain ran model output with exec (CVE-2023-29374): os.system from model code.
    Attack(
        "import_os_system",
        "imports",
        "import os\nos.system('touch MARKER')",
        REFUSED,
        "import of 'os' is not allowed",
    ),
    # LangChain PALChain (CVE-2023-36258): subprocess from generated code.
    Attack("import_subprocess", "imports", "import subprocess\nsubprocess.run(['touch', 'MARKER'])", REFUSED),
    # Ned Batchelder, "Eval really is dangerous" (2012): __import__ as a builtin.
    Attack("dunder_import", "imports", "__import__('os').system('touch MARKER')", REFUSED),
    # smolagents DANGEROUS_MODULES lists builtins: the real builtins module hands out everything.
    Attack("import_builtins", "imports", "import builtins\nbuiltins.open('SECRET').read()", REFUSED),
    # unslothai/unsloth#5468 stress test (ctypes.CDLL(None) to call libc directly).
    Attack("import_ctypes", "imports", "import ctypes\nctypes.CDLL(None).system(b'touch MARKER')", REFUSED),
    # openswarm-ai/openswarm#134: sys.modules['os'] past an import allowlist.
    Attack("sys_modules", "imports", "import sys\nsys.modules['os'].system('touch MARKER')", REFUSED),
    # CPython import_from falls back to sys.modules[pkg.__name__ + '.x'] (bpo-17636): real json.decoder.
    Attack("from_json_import_decoder", "imports", "from json import decoder\ndecoder.re.enum.sys", REFUSED),
    # Same fallback through an allowed package: collections.abc is in sys.modules.
    Attack("from_collections_import_abc", "imports", "from collections import abc\nabc.sys", REFUSED),
    # The import hook itself, reached through the builtins mapping (pyjail classic).
    Attack("builtins_import_hook", "imports", "__builtins__['__import__']('os')", REFUSED),
    # Submodule import of an allowed package (issue text: configurations leaking real modules).
    Attack("import_json_decoder", "imports", "import json.decoder", REFUSED),
    # urllib.request is network access next to the allowed urllib.parse (unsloth#5468 egress cases).
    Attack(
        "import_urllib_request",
        "imports",
        "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:PORT')",
        REFUSED,
    ),
    # unsloth#5468 network egress: a raw socket to a local listener.
    Attack(
        "import_socket", "imports", "import socket\nsocket.create_connection(('127.0.0.1', PORT))", REFUSED
    ),
    # importlib bypasses the import statement (pyjail classic).
    Attack("import_importlib", "imports", "import importlib\nimportlib.import_module('os')", REFUSED),
    # Relative imports resolve against a package the sandbox does not have.
    Attack("relative_import", "imports", "from . import worker", REFUSED),
    # --------------------------------------------------------------- file reads
    # unsloth#5468 file-leak cases: plain open() of a sensitive file.
    Attack("open_builtin", "file reads", "print(open('SECRET').read())", REFUSED, "open() is not available"),
    # smolagents bans io because io.open is open.
    Attack("io_open", "file reads", "import io\nprint(io.open('SECRET').read())", REFUSED),
    # io.FileIO reads files without open().
    Attack("io_fileio", "file reads", "import io\nprint(io.FileIO('SECRET').read())", REFUSED),
    # Issue text: configurations that hand out real modules leak codecs.open through json.
    Attack(
        "json_codecs_open", "file reads", "import json\nprint(json.codecs.open('SECRET').read())", REFUSED
    ),
    # Issue text: `from json import codecs`.
    Attack(
        "from_json_import_codecs",
        "file reads",
        "from json import codecs\nprint(codecs.open('SECRET').read())",
        REFUSED,
    ),
    # Pyjail classic: license()/credits() read files through site._Printer.
    Attack("license_printer", "file reads", "license._Printer__filenames", REFUSED),
    # CPython Lib/base64.py: main() reads sys.stdin, which is the worker's protocol pipe.
    Attack("base64_main_reads_stdin", "file reads", "import base64\nbase64.main()", REFUSED),
    # input() would read the protocol pipe too.
    Attack("input_reads_pipe", "file reads", "input()", REFUSED),
    # open() reached through an alias, past an AST check (unsloth#5603 bypass table).
    Attack("open_alias", "file reads", "f = open\nprint(f('SECRET').read())", REFUSED),
    # -------------------------------------------- introspection and frame escapes
    # Ned Batchelder (2012): walk from a literal to object.__subclasses__().
    Attack("subclasses_walk", "introspection", "().__class__.__bases__[0].__subclasses__()", REFUSED),
    # Dunder names built at run time (crewAIInc/crewAI#4643 review: chr()-built names).
    Attack("dynamic_dunder_getattr", "introspection", "getattr((), '_' + '_class_' + '_').__base__", REFUSED),
    # Function globals: the usual pyjail path to builtins.
    Attack("function_globals", "introspection", "getattr(lambda: 0, '__globals__')", REFUSED),
    # CVE-2023-37271 (GHSA-wqc8-x2pr-7jqh): generator gi_frame.f_back.f_globals.
    Attack(
        "generator_gi_frame", "introspection", "g = (x for x in [1])\ng.gi_frame.f_back.f_globals", REFUSED
    ),
    # CVE-2023-37271 again, with the attribute name as a string.
    Attack(
        "generator_gi_frame_getattr", "introspection", "g = (x for x in [1])\ngetattr(g, 'gi_frame')", REFUSED
    ),
    # Traceback frames: e.__traceback__.tb_frame.f_back (RestrictedPython INSPECT_ATTRIBUTES).
    Attack(
        "traceback_frame",
        "introspection",
        "try:\n    1 / 0\nexcept Exception as e:\n    getattr(e, '__traceback__').tb_frame",
        REFUSED,
    ),
    # tb_frame by its public name on a traceback obtained any way.
    Attack("tb_frame_name", "introspection", "x = None\nx.tb_frame", REFUSED),
    # CVE-2024-47532 (GHSA-5rfv-66g4-jr8h): AttributeError.obj leaks the real module.
    Attack(
        "attributeerror_obj",
        "introspection",
        "import re\ntry:\n    re.nothing\nexcept AttributeError as e:\n    print(e.obj)",
        REFUSED,
    ),
    # type(name, bases, dict): a class with arbitrary dunders from a dict literal.
    Attack("type_three_args", "introspection", "type(1)('X', (), {'y': 1})", REFUSED),
    # The real metaclass through type(type(x)), then a class from a raw namespace.
    Attack("metaclass_via_type_of_type", "introspection", "t = type(type(1))\nt('X', (), {})", REFUSED),
    # User metaclass: class M(type) gives a class factory with arbitrary namespaces.
    Attack("user_metaclass", "introspection", "class M(type(int)):\n    pass", REFUSED),
    # Defining __getattribute__/__del__ hooks that the interpreter calls implicitly.
    Attack("define_del_hook", "introspection", "class C:\n    def __del__(self):\n        pass", REFUSED),
    # globals()/vars()/locals() reach __builtins__ (pyjail classic).
    Attack("globals_builtins", "introspection", "globals()['__builtins__']", REFUSED),
    # mro() hands out the class hierarchy (object at the top).
    Attack("mro_method", "introspection", "int.mro()[-1]", REFUSED),
    # PEP 634 class patterns read attributes with the real getattr (no guard).
    Attack("match_class_pattern", "introspection", "match 'x':\n    case str(format=f):\n        f", REFUSED),
    # CVE-2025-22153 (GHSA-gmj9-h825-chq2): try/except* type confusion.
    Attack(
        "try_except_star", "introspection", "try:\n    1 / 0\nexcept* ZeroDivisionError:\n    pass", REFUSED
    ),
    # CVE-2026-55830 (GHSA-ffg3-p8fm-mjx2): positional-only parameters shadowing guard hooks.
    Attack("posonly_shadows_getattr", "introspection", "def f(_getattr_, /):\n    return 1", REFUSED),
    # Same advisory: shadowing _write_ to poison a shared module.
    Attack(
        "posonly_shadows_write",
        "introspection",
        "import json\ndef f(_write_=lambda o: o, /):\n    json.dumps = len\nf()",
        REFUSED,
    ),
    # CPython Lib/functools.py: update_wrapper copies any named attributes (__globals__) between objects.
    Attack(
        "functools_update_wrapper",
        "introspection",
        "import functools, json\nclass W:\n    pass\nfunctools.update_wrapper(W(), json.loads, assigned=('__globals__',))",
        REFUSED,
    ),
    # CPython functools.singledispatch.register evaluates string annotations (get_type_hints).
    Attack(
        "functools_singledispatch", "introspection", "import functools\nfunctools.singledispatch", REFUSED
    ),
    # Issue text: typing.get_type_hints evaluates annotation strings.
    Attack("typing_get_type_hints", "introspection", "from typing import get_type_hints", REFUSED),
    # Issue text: operator.attrgetter traverses attributes named by strings.
    Attack(
        "operator_attrgetter",
        "introspection",
        "import operator\noperator.attrgetter('__class__')(1)",
        REFUSED,
    ),
    # Issue text: operator.methodcaller.
    Attack(
        "operator_methodcaller",
        "introspection",
        "import operator\noperator.methodcaller('__reduce__')",
        REFUSED,
    ),
    # Helpers are bound methods: __self__ would be the worker object with its pipes.
    Attack("helper_self", "introspection", "note.__self__.proto_out", REFUSED),
    # ------------------------------------------------------------- format strings
    # Armin Ronacher, "Be Careful with Python's New-Style String Format" (2016).
    Attack("format_attr_walk", "format strings", "'{0.__class__.__mro__}'.format(1)", REFUSED),
    # Skyvern-AI/skyvern#7039: format traversal to codecs through a function's globals.
    Attack(
        "format_globals_codecs",
        "format strings",
        "import json\n'{0.__globals__[codecs]}'.format(json.dumps)",
        REFUSED,
    ),
    # pallets/jinja#2205: the unbound str.format descriptor skipped the sandboxed formatter.
    Attack("format_unbound", "format strings", "str.format('{0.__globals__}', peek)", REFUSED),
    # format_map with a mapping (same traversal).
    Attack("format_map_walk", "format strings", "'{x.__class__}'.format_map({'x': 1})", REFUSED),
    # Nested fields inside the format spec are resolved too (GHSA-hp3v-5vw7-fx9w: Formatter field resolution).
    Attack("format_nested_spec", "format strings", "'{0:{1.__class__}}'.format(1, 2)", REFUSED),
    # CVE-2023-41039 (GHSA-xjw2-6jm9-rf67): string.Formatter().get_field.
    Attack(
        "string_formatter",
        "format strings",
        "import string\nstring.Formatter().get_field('0.__class__', [1], {})",
        REFUSED,
    ),
    # ctf-wiki/ctf-wiki#381: f-strings as an escape vector.
    Attack("fstring_dunder", "format strings", "f'{().__class__}'", REFUSED),
    # ----------------------------------------------------------- module re-exports
    # Issue text: re.enum.sys when real modules are handed out.
    Attack("re_enum_sys", "module re-exports", "import re\nre.enum.sys.modules['os']", REFUSED),
    # Real module objects reached through a module's public attributes.
    Attack("json_decoder_attr", "module re-exports", "import json\njson.decoder.scanstring", REFUSED),
    # statistics re-exports collections helpers; a module attribute must never come back.
    Attack(
        "dir_exposes_no_modules",
        "module re-exports",
        "import re\n[n for n in dir(re) if n in ('enum', 'sys', 'copyreg')][0]",
        REFUSED,
    ),
    # dataclasses.FunctionType would build functions from code objects.
    Attack(
        "dataclasses_functiontype",
        "module re-exports",
        "import dataclasses\ndataclasses.FunctionType",
        REFUSED,
    ),
    # ----------------------------------------------------------- module poisoning
    # dimagi/open-chat-studio#4239: json.dumps = evil persisted for later executions.
    Attack(
        "poison_json_dumps",
        "module poisoning",
        "import json\njson.dumps = lambda *a, **k: 'PWNED'",
        REFUSED,
        after=("import json\nprint(json.dumps([1]))", "[1]\n"),
    ),
    # Same report: datetime.MINYEAR = 9999.
    Attack(
        "poison_datetime_constant", "module poisoning", "import datetime\ndatetime.MINYEAR = 9999", REFUSED
    ),
    # setattr() as a function instead of an assignment.
    Attack("poison_setattr_re", "module poisoning", "import re\nsetattr(re, 'search', None)", REFUSED),
    # Class attributes of library types are shared by everyone.
    Attack(
        "poison_counter_class",
        "module poisoning",
        "from collections import Counter\nCounter.most_common = lambda self, n=None: []",
        REFUSED,
        after=("from collections import Counter\nprint(Counter('aab').most_common(1))", "[('a', 2)]\n"),
    ),
    # Global decimal context changes every later computation.
    Attack(
        "poison_decimal_context", "module poisoning", "import decimal\ndecimal.getcontext().prec = 2", REFUSED
    ),
    # del of a module attribute.
    Attack("poison_del_attr", "module poisoning", "import re\ndel re.search", REFUSED),
    # ----------------------------------------------------------- exec/eval/compile
    # LangChain PythonREPL / llama-index safe_exec bypasses went through exec/eval.
    Attack("exec_call", "exec/eval/compile", "exec('import os')", REFUSED, "exec() is not allowed"),
    # eval of a built string.
    Attack("eval_call", "exec/eval/compile", "eval('1' + '+1')", REFUSED),
    # An alias defeats a check on the call's name.
    Attack("eval_alias", "exec/eval/compile", "e = eval\ne('1')", REFUSED),
    # compile() makes code objects.
    Attack("compile_call", "exec/eval/compile", "compile('1', 'x', 'eval')", REFUSED),
    # unsloth#5603 bypass table: getattr(__builtins__, 'open').
    Attack("builtins_getattr", "exec/eval/compile", "getattr(__builtins__, 'eval')('1')", REFUSED),
    # ------------------------------------------------------ resource exhaustion
    # dimagi/open-chat-studio#4240: `while True` with no CPU budget.
    Attack("cpu_loop", "resource exhaustion", "while True:\n    pass", REFUSED, "CpuTimeExceeded"),
    # A loop that swallows the CPU-limit exception: only the kernel can stop it.
    Attack(
        "cpu_loop_swallowing",
        "resource exhaustion",
        "while True:\n    try:\n        while True:\n            n = 1\n    except BaseException:\n        pass",
        LOST,
    ),
    # Long C-level work never returns to Python's signal check: the kernel kills it.
    Attack("cpu_bigint_pow", "resource exhaustion", "x = 7 ** (10 ** 8)", CONTAINED),
    # ReDoS: catastrophic backtracking (OWASP "Regular expression Denial of Service").
    Attack(
        "regex_backtracking",
        "resource exhaustion",
        "import re\nre.match(r'(a+)+$', 'a' * 40 + 'b')",
        CONTAINED,
    ),
    # dimagi/open-chat-studio#4240: "a" * huge allocates freely without a memory limit.
    Attack("memory_one_shot", "resource exhaustion", "s = 'x' * (10 ** 11)", CONTAINED),
    # Memory grown in steps until the limit.
    Attack(
        "memory_growth",
        "resource exhaustion",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))",
        CONTAINED,
    ),
    # RCP-004 context window overflow (msaleme/red-team-blue-team-agent-fabric#50): a flood of output.
    Attack("output_flood", "resource exhaustion", "print('x' * 50_000_000)", RUNS),
    # Output flood in a loop until the CPU limit.
    Attack("output_flood_loop", "resource exhaustion", "while True:\n    print('spam' * 1000)", CONTAINED),
    # Unbounded recursion.
    Attack(
        "recursion", "resource exhaustion", "def f(n):\n    return f(n + 1)\nf(0)", REFUSED, "RecursionError"
    ),
    # repr of a deeply nested structure recurses in C.
    Attack(
        "nested_repr",
        "resource exhaustion",
        "a = []\nfor _ in range(200000):\n    a = [a]\nprint(a)",
        CONTAINED,
    ),
    # Parser/AST bombs: deeply nested source.
    Attack("parser_bomb", "resource exhaustion", "x = " + "(" * 300000, REFUSED),
    # Classic fork bomb.
    Attack("fork_bomb", "resource exhaustion", "import os\nwhile True:\n    os.fork()", REFUSED),
    # Threads as a fork-bomb variant.
    Attack(
        "thread_bomb",
        "resource exhaustion",
        "import threading\nthreading.Thread(target=print).start()",
        REFUSED,
    ),
    # ---------------------------------------------------------- exits and signals
    # Issue 2 (engine): the worker must survive raise SystemExit.
    Attack("system_exit", "exits and signals", "raise SystemExit(0)", REFUSED, "SystemExit"),
    # exit() / quit() from site.
    Attack("exit_builtin", "exits and signals", "exit(1)", REFUSED),
    # KeyboardInterrupt raised by code.
    Attack("keyboard_interrupt", "exits and signals", "raise KeyboardInterrupt", REFUSED),
    # GeneratorExit outside a generator.
    Attack("generator_exit", "exits and signals", "raise GeneratorExit", REFUSED),
    # A BaseException subclass that `except Exception` would not catch.
    Attack(
        "base_exception_subclass",
        "exits and signals",
        "class Boom(BaseException):\n    pass\nraise Boom('x')",
        REFUSED,
    ),
    # os._exit / kill of the parent.
    Attack("kill_parent", "exits and signals", "import os\nos.kill(os.getppid(), 9)", REFUSED),
    # signal module to raise SIGKILL on itself.
    Attack("signal_module", "exits and signals", "import signal\nsignal.raise_signal(9)", REFUSED),
    # A generator finalizer that runs later, at garbage collection, outside the cell.
    Attack(
        "deferred_finalizer",
        "exits and signals",
        "def g():\n    try:\n        yield 1\n    finally:\n        while True:\n            pass\n"
        "class Box:\n    pass\nb = Box()\nb.me = b\nb.gen = g()\nnext(b.gen)\ndel b\n"
        "junk = [[] for _ in range(300000)]",
        RUNS,
    ),
    # ------------------------------------------------- tampering with context/helpers
    # Rebinding `context` must not survive into the next cell.
    Attack(
        "rebind_context", "tampering", "context = 'poisoned'\ncontext_lines = ['fake']", RUNS, after=INTACT
    ),
    # Deleting helpers.
    Attack("delete_helpers", "tampering", "del peek\ndel context_lines", RUNS, after=INTACT),
    # Replacing a helper with a fake one.
    Attack(
        "fake_peek", "tampering", "peek = lambda *a, **k: 'row 1 alpha'\nllm_query = None", RUNS, after=INTACT
    ),
    # Writing into the shared line view.
    Attack("write_context_lines", "tampering", "context_lines[0] = 'fake'", REFUSED, after=INTACT),
    # Attributes on helper functions.
    Attack("setattr_helper", "tampering", "setattr(peek, 'cache', 1)", REFUSED),
    # Reaching the worker's state through a helper's defaults or function object.
    Attack("helper_func_defaults", "tampering", "grep.__func__.__defaults__", REFUSED),
    # Shadowing builtins does not change what the helpers compute.
    Attack(
        "shadow_builtins",
        "tampering",
        "len = lambda x: 0\nstr = None",
        RUNS,
        after=(
            "print(peek(1, 1).splitlines()[-1].strip(), context_lines[0], len('abc'))\ndel len, str",
            "1| row 1 alpha row 1 alpha 0\n",
        ),
    ),
]


@pytest.fixture(scope="module")
def world() -> Iterator[dict]:
    base = Path(tempfile.mkdtemp(prefix="rlm-attacks-"))
    os.chmod(base, 0o755)
    data = base / "input.log"
    data.write_text("".join(f"row {i} alpha\n" for i in range(1, N_LINES + 1)))
    secret_text = f"SECRET-{uuid.uuid4().hex}"
    secret = base / "secret.txt"
    secret.write_text(secret_text)
    for path in (data, secret):
        os.chmod(path, 0o644)  # readable by the worker's uid: only the sandbox stands in the way
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    # The worker `rlm ask` starts (the product's factory): its index and limits are surface too.
    sandbox = product_worker(data, base / "cache")
    try:
        yield {
            "sandbox": sandbox,
            "secret": secret,
            "secret_text": secret_text,
            "marker": base / "pwned",
            "listener": listener,
            "port": listener.getsockname()[1],
        }
    finally:
        sandbox.kill()
        listener.close()
        shutil.rmtree(base, ignore_errors=True)


def _exec(sandbox: Sandbox, code: str) -> tuple[str, dict]:
    return exec_cell(sandbox, code, wall=WALL_SECONDS, cpu=CPU_SECONDS)


def _no_connection(listener: socket.socket) -> bool:
    try:
        conn, _ = listener.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


def test_battery_is_large_and_grouped() -> None:
    names = [a.name for a in ATTACKS]
    assert len(ATTACKS) >= 60 and len(set(names)) == len(names)
    groups = {a.group for a in ATTACKS}
    for group in (
        "imports",
        "file reads",
        "introspection",
        "format strings",
        "module re-exports",
        "exec/eval/compile",
        "module poisoning",
        "resource exhaustion",
        "exits and signals",
        "tampering",
    ):
        assert group in groups


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_is_held(world: dict, attack: Attack) -> None:
    sandbox: Sandbox = world["sandbox"]
    code = (
        attack.code.replace("SECRET", str(world["secret"]))
        .replace("MARKER", str(world["marker"]))
        .replace("PORT", str(world["port"]))
    )
    kind, reply = _exec(sandbox, code)
    text = f"{reply.get('output', '')}\n{reply.get('error', '')}"

    # nothing escapes, and no internals show
    assert world["secret_text"] not in text
    for internal in ("Traceback", "rlm/sandbox", "site-packages", "RestrictedPython"):
        assert internal not in text, text
    assert not world["marker"].exists()
    assert _no_connection(world["listener"])

    if attack.expect == LOST:
        assert kind == "lost", f"worker survived: {reply}"
    elif attack.expect == REFUSED:
        assert kind == "reply", f"worker lost: {reply}"
        assert reply["ok"] is False and reply["error"], f"not refused: {reply}"
    elif attack.expect == CONTAINED:
        assert kind == "lost" or (reply["ok"] is False and reply["error"]), f"not contained: {reply}"
    elif attack.expect == RUNS:
        assert kind == "reply", f"worker lost: {reply}"
    if attack.says:
        assert attack.says in text

    # the next cell runs (on a restarted worker if this one was killed)
    kind, reply = _exec(sandbox, "print(6 * 7)")
    assert kind == "reply" and reply["output"] == "42\n", reply
    if attack.after:
        kind, reply = _exec(sandbox, attack.after[0])
        assert kind == "reply" and reply["error"] is None, reply
        assert reply["output"] == attack.after[1]


def test_a_killed_worker_restarts_with_its_variables_gone(world: dict) -> None:
    sandbox: Sandbox = world["sandbox"]
    kind, reply = _exec(sandbox, "kept = 'before'")
    assert kind == "reply" and reply["ok"]
    kind, _ = _exec(
        sandbox,
        "while True:\n    try:\n        while True:\n            n = 1\n    except BaseException:\n        pass",
    )
    assert kind == "lost"
    kind, reply = _exec(sandbox, "kept")
    assert kind == "reply" and "NameError" in reply["error"]
    assert sandbox.ready["sandbox"]["active"], "the restarted worker reports its layers"


def test_a_refused_cell_keeps_the_variables(world: dict) -> None:
    sandbox: Sandbox = world["sandbox"]
    _exec(sandbox, "kept = 'still here'")
    kind, reply = _exec(sandbox, "while True:\n    pass")
    assert kind == "reply" and "CpuTimeExceeded" in reply["error"]
    kind, reply = _exec(sandbox, "print(kept)")
    assert reply["output"] == "still here\n"
