"""The language layer on its own: what a cell may do, what it may not, and
how the outcome reads."""

from __future__ import annotations

import textwrap

import pytest

from rlm.sandbox.worker.interpreter import CellOutcome, Interpreter
from rlm.sandbox.worker.policy import ALLOWED_MODULES


def make(**protected: object) -> Interpreter:
    base: dict[str, object] = {"context": "alpha\nbeta\ngamma", "context_lines": ("alpha", "beta", "gamma")}
    base.update(protected)
    return Interpreter(base)


def run(code: str, interp: Interpreter | None = None) -> CellOutcome:
    return (interp or make()).run(textwrap.dedent(code))


def ok(code: str, interp: Interpreter | None = None) -> str:
    outcome = run(code, interp)
    assert outcome.error is None, outcome.error
    return outcome.output


# --- what analysts write -------------------------------------------------------


ALLOWED = [
    (
        "d = {}\nfor k in 'abca':\n    d[k] = d.get(k, 0)\n    d[k] += 1\nprint(sorted(d.items()))",
        "[('a', 2), ('b', 1), ('c', 1)]\n",
    ),
    (
        "class C:\n    def __init__(self):\n        self.n = 0\n    def inc(self):\n        self.n += 1\nc = C()\nc.inc(); c.inc()\nprint(c.n)",
        "2\n",
    ),
    ("x = [1, 2]\nx[0] += 10\nx[1:] += [3]\nprint(x)", "[11, 2, 3]\n"),
    ("print('{} and {name}'.format(1, name='two'))", "1 and two\n"),
    ("print('{0[a]} {0[b]:>3}'.format({'a': 1, 'b': 2}))", "1   2\n"),
    ("print('{a}-{b}'.format_map({'a': 1, 'b': 2}))", "1-2\n"),
    ("w = 6\nprint(f'{3.14159:.2f}|{\"x\":>{w}}|{w!r}')", "3.14|     x|6\n"),
    (
        "from datetime import datetime\nprint(datetime.strptime('2024-03-05 10:11:12', '%Y-%m-%d %H:%M:%S').isoformat())",
        "2024-03-05T10:11:12\n",
    ),
    (
        "from dataclasses import dataclass, field\n@dataclass\nclass Hit:\n    ip: str\n    n: int = 0\n    tags: list = field(default_factory=list)\nh = Hit('1.2.3.4')\nh.n += 2\nprint(h)",
        "Hit(ip='1.2.3.4', n=2, tags=[])\n",
    ),
    (
        "def counter():\n    n = 0\n    def inc():\n        nonlocal n\n        n += 1\n        return n\n    return inc\nf = counter()\nf(); print(f())",
        "2\n",
    ),
    (
        "try:\n    int('x')\nexcept ValueError as e:\n    print('bad:', e)\nfinally:\n    print('done')",
        "bad: invalid literal for int() with base 10: 'x'\ndone\n",
    ),
    (
        "def gen(n):\n    for i in range(n):\n        yield i * i\nprint(list(gen(4)), sum(x for x in gen(3)))",
        "[0, 1, 4, 9] 5\n",
    ),
    ("import io\nwith io.StringIO('a\\nb\\n') as f:\n    print(f.read().split())", "['a', 'b']\n"),
    (
        "words = ['bb', 'a', 'ccc']\nprint(sorted(words, key=lambda w: len(w)), min(words, key=len), max(words, key=lambda w: w[-1]))",
        "['a', 'bb', 'ccc'] a ccc\n",
    ),
    (
        "from collections import Counter\nprint(Counter('abracadabra').most_common(2))",
        "[('a', 5), ('b', 2)]\n",
    ),
    (
        "first, *rest = [1, 2, 3]\n(a, b), c = (4, 5), 6\nprint(first, rest, a, b, c, *rest)",
        "1 [2, 3] 4 5 6 2 3\n",
    ),
    (
        "import re\nm = re.search(r'(\\d+)-(\\d+)', 'x 10-20 y')\nprint(m.group(1), m.groups(), re.findall(r'\\w', 'ab'))",
        "10 ('10', '20') ['a', 'b']\n",
    ),
    ("import json\nprint(json.dumps(json.loads('{\"a\": [1, 2]}'), sort_keys=True))", '{"a": [1, 2]}\n'),
    ("import csv, io\nrows = list(csv.DictReader(io.StringIO('a,b\\n1,2\\n')))\nprint(rows[0]['b'])", "2\n"),
    ("import statistics, math\nprint(statistics.median([3, 1, 2]), math.sqrt(16))", "2 4.0\n"),
    (
        "from collections import defaultdict\ng = defaultdict(list)\ng['k'].append(1)\nprint(dict(g))",
        "{'k': [1]}\n",
    ),
    (
        "import itertools, functools, operator\nprint(list(itertools.islice(itertools.count(), 3)), functools.reduce(operator.add, [1, 2, 3]))",
        "[0, 1, 2] 6\n",
    ),
    (
        "import heapq, bisect\nprint(heapq.nlargest(2, [5, 1, 9]), bisect.bisect_left([1, 3, 5], 4))",
        "[9, 5] 2\n",
    ),
    (
        "from decimal import Decimal\nfrom fractions import Fraction\nprint(Decimal('1.10') + Decimal('2.2'), Fraction(1, 3) * 3)",
        "3.30 1\n",
    ),
    (
        "import string, textwrap\nprint(string.Template('$x!').substitute(x=1), textwrap.shorten('a b c d e f', 7))",
        "1! a [...]\n",
    ),
    (
        "from typing import Dict, List, Optional\ndef f(x: List[int]) -> Optional[Dict[str, int]]:\n    return {'n': len(x)}\nprint(f([1]))",
        "{'n': 1}\n",
    ),
    (
        "from urllib.parse import urlparse, parse_qs\nprint(parse_qs(urlparse('/a?x=1&x=2').query))",
        "{'x': ['1', '2']}\n",
    ),
    ("import ipaddress\nprint(ipaddress.ip_address('10.0.0.1').is_private)", "True\n"),
    (
        "class P:\n    def __init__(self, v):\n        self.v = v\n    def __repr__(self):\n        return f'P({self.v})'\n    def __lt__(self, other):\n        return self.v < other.v\nprint(sorted([P(2), P(1)]))",
        "[P(1), P(2)]\n",
    ),
    (
        "class Base:\n    def hi(self):\n        return 'base'\nclass Kid(Base):\n    def hi(self):\n        return 'kid+' + super().hi()\nprint(Kid().hi())",
        "kid+base\n",
    ),
    ("print([print(i) for i in range(2)])", "0\n1\n[None, None]\n"),
    ("class K:\n    print('in class body')", "in class body\n"),
    ("x = 5\nx += 1\nx -= 2\nx *= 3\nprint(x)", "12\n"),
    (
        "print(getattr('abc', 'upper')(), hasattr('abc', '__class__'), hasattr('abc', 'strip'))",
        "ABC False True\n",
    ),
    ("s = {1}\ns |= {2}\nprint(s, isinstance(s, set))", "{1, 2} True\n"),
    ("from collections import namedtuple\nPt = namedtuple('Pt', 'x y')\nprint(Pt(1, 2).x)", "1\n"),
    ("total = 0\nfor i, (a, b) in enumerate(zip('ab', [1, 2])):\n    total += i * b\nprint(total)", "2\n"),
    ("if (n := len('abcd')) > 3:\n    print(n)", "4\n"),
    (
        "import base64, hashlib\nprint(base64.b64encode(b'hi').decode(), hashlib.md5(b'').hexdigest()[:6])",
        "aGk= d41d8c\n",
    ),
    ("import time\nprint(time.strftime('%Y', time.gmtime(0)))", "1970\n"),
]


@pytest.mark.parametrize(("code", "expected"), ALLOWED, ids=[str(i) for i in range(len(ALLOWED))])
def test_analyst_code_runs(code: str, expected: str) -> None:
    assert ok(code) == expected


def test_last_expression_is_shown_like_a_repl_and_none_is_not() -> None:
    interp = make()
    assert ok("x = 41\nx + 1", interp) == "42\n"
    assert ok("'text'", interp) == "'text'\n"
    assert ok("print('p')\n[1, 2]", interp) == "p\n[1, 2]\n"
    assert ok("None", interp) == ""
    assert ok("d = {}\nd.get('missing')", interp) == ""


def test_print_inside_functions_defined_in_earlier_cells_reaches_the_current_cell() -> None:
    interp = make()
    assert ok("def shout(s):\n    print(s.upper())", interp) == ""
    assert ok("shout('a')", interp) == "A\n"
    assert ok("shout('b'); shout('c')", interp) == "B\nC\n"


def test_namespace_persists_across_cells() -> None:
    interp = make()
    ok("counts = {'x': 1}\nclass Box:\n    pass\nb = Box()\nb.v = 3\ndef twice(n):\n    return 2 * n", interp)
    assert ok("counts['x'] += 1\nprint(counts, b.v, twice(b.v))", interp) == "{'x': 2} 3 6\n"
    assert interp.namespace["counts"] == {"x": 2}
    assert "counts" in interp.namespace and interp.namespace["b"].v == 3


def test_protected_names_are_reinjected_before_every_cell() -> None:
    def peek(n: int) -> str:
        return f"peek {n}"

    interp = make(peek=peek)
    ok("context = 'poisoned'\npeek = lambda n: 'fake'\ndel context_lines", interp)
    assert ok("print(context.splitlines()[0], peek(1), len(context_lines))", interp) == "alpha peek 1 3\n"
    # functions defined before the poisoning see the real helpers too
    ok("def first():\n    return context_lines[0]\ncontext_lines = ['evil']", interp)
    assert ok("first()", interp) == "'alpha'\n"


def test_protected_objects_cannot_be_written() -> None:
    shared: list[str] = ["a", "b"]
    interp = make(context_lines=shared)
    outcome = run("context_lines[0] = 'x'", interp)
    assert outcome.error is not None and "read-only" in outcome.error
    assert shared == ["a", "b"]
    outcome = run("import re\nre.search = None", interp)
    assert outcome.error is not None and "TypeError" in outcome.error


def test_error_text_names_the_exception_and_the_users_line_only() -> None:
    interp = make()
    ok("def parse(v):\n    return int(v)\n", interp)
    outcome = run("rows = ['1', 'x']\nvals = [parse(r) for r in rows]", interp)
    assert outcome.error is not None
    lines = outcome.error.splitlines()
    assert lines[0] == "ValueError: invalid literal for int() with base 10: 'x'"
    assert any("line 2: vals = [parse(r) for r in rows]" in line for line in lines)
    assert lines[-1].endswith("in parse: return int(v)")
    for internal in ("RestrictedPython", "policy.py", "_getattr_", "Traceback"):
        assert internal not in outcome.error


def test_output_before_an_error_is_kept() -> None:
    outcome = run("print('before')\n1 / 0\nprint('after')")
    assert outcome.output == "before\n"
    assert outcome.error is not None and outcome.error.startswith("ZeroDivisionError")
    assert "at line 2: 1 / 0" in outcome.error


def test_syntax_errors_are_reported_with_their_line() -> None:
    outcome = run("x = 1\ny = = 2")
    assert outcome.error is not None
    assert (
        outcome.error.startswith("SyntaxError:") and "line 2" in outcome.error and "y = = 2" in outcome.error
    )


@pytest.mark.parametrize(
    "code",
    ["raise SystemExit(3)", "raise KeyboardInterrupt", "raise GeneratorExit", "exit()", "quit(0)"],
)
def test_exits_are_reported_and_the_interpreter_survives(code: str) -> None:
    interp = make()
    ok("kept = 7", interp)
    outcome = run(code, interp)
    assert outcome.error is not None
    assert ok("kept", interp) == "7\n"


# --- what is refused, and how it is explained -------------------------------------


REFUSED = [
    ("import os", "import of 'os' is not allowed; allowed modules: "),
    ("import subprocess as sp", "import of 'subprocess' is not allowed"),
    ("from os import path", "import of 'os' is not allowed"),
    ("import json.decoder", "import of 'json.decoder' is not allowed"),
    ("from json import codecs", "'codecs' is not available from 'json'"),
    ("from json import decoder", "'decoder' is not available from 'json'"),
    ("from . import x", "relative imports are not allowed"),
    ("open('/etc/passwd')", "open() is not available in this sandbox"),
    ("f = open\nf('/etc/hostname')", "open() is not available"),
    ("exec('1')", "exec() is not allowed"),
    ("eval('1+1')", "eval() is not allowed"),
    ("e = eval\ne('1')", "eval() is not available"),
    ("compile('1', 'f', 'eval')", "compile() is not available"),
    ("().__class__", '"__class__" is an invalid attribute name'),
    ("getattr((), '__class__')", 'access to attribute "__class__" is not allowed'),
    ("'{0.__class__}'.format(1)", 'access to attribute "__class__" is not allowed'),
    ("str.format('{0.__globals__}', print)", 'access to attribute "__globals__" is not allowed'),
    ("'{x.__class__}'.format_map({'x': 1})", 'access to attribute "__class__" is not allowed'),
    (
        "def g():\n    yield 1\ng().gi_frame",
        '"gi_frame" is a restricted name: frame and code introspection is not allowed',
    ),
    ("getattr((i for i in []), 'gi_frame')", 'attribute "gi_frame" is not allowed'),
    ("import re\nre.enum", "module 're' has no attribute 'enum'"),
    ("import string\nstring.Formatter", "module 'string' has no attribute 'Formatter'"),
    ("import operator\noperator.attrgetter", "no attribute 'attrgetter'"),
    ("import functools\nfunctools.update_wrapper", "no attribute 'update_wrapper'"),
    ("import typing\ntyping.get_type_hints", "no attribute 'get_type_hints'"),
    ("import io\nio.open", "no attribute 'open'"),
    ("type(int)('X', (), {'y': 1})", "three arguments is not allowed"),
    ("_secret = 1", 'invalid variable name because it starts with "_"'),
    ("match 1:\n    case int(real=r): pass", "match statements are not allowed"),
    ("try:\n    pass\nexcept* ValueError:\n    pass", "TryStar statements are not allowed"),
    ("async def f():\n    pass", "AsyncFunctionDef statements are not allowed"),
    ("class M(type(1).__base__):\n    pass", '"__base__" is an invalid attribute name'),
    ("globals()", "globals() is not available"),
    ("input()", "input() is not available"),
    ("x = 1\nx.real = 2", "cannot assign to attributes or items of int objects"),
    ("setattr(print, 'x', 1)", "cannot assign to attributes or items of"),
    (
        "class C:\n    def __getattribute__(self, n):\n        return 1",
        'invalid variable name because it starts with "_"',
    ),
]


@pytest.mark.parametrize(("code", "message"), REFUSED, ids=[c.splitlines()[0][:30] for c, _ in REFUSED])
def test_refused(code: str, message: str) -> None:
    outcome = run(code)
    assert outcome.error is not None, f"not refused: {code!r} -> {outcome.output!r}"
    assert message in outcome.error


def test_allowed_modules_are_the_documented_ones() -> None:
    for name in (
        "re",
        "json",
        "math",
        "statistics",
        "collections",
        "itertools",
        "functools",
        "datetime",
        "string",
        "textwrap",
        "heapq",
        "bisect",
        "csv",
        "io",
        "decimal",
        "fractions",
        "operator",
    ):
        assert name in ALLOWED_MODULES
    assert ok("import io\nprint(dir(io))") == "['BytesIO', 'StringIO']\n"


def test_names_of_types_and_functions_are_readable_and_nothing_else_private() -> None:
    code = (
        "try:\n    int('x')\nexcept Exception as e:\n    print(type(e).__name__, type(e).__qualname__)\n"
        "def f():\n    pass\nprint(f.__name__, getattr(len, '__name__'))"
    )
    assert ok(code) == "ValueError ValueError\nf len\n"
    for refused in (
        "print(type(1).__class__)",
        "print(len.__self__)",
        "class A:\n    pass\nA.__name__ = 'B'",
    ):
        outcome = run(refused)
        assert outcome.error is not None and "_" in outcome.error, refused
    outcome = run("import json\nprint(json.__name__)")  # a module stand-in has no name to leak
    assert outcome.error is not None and "__name__" in outcome.error


def test_module_stand_ins_expose_no_modules_and_are_read_only() -> None:
    code = (
        "import re, json, collections, datetime, functools\n"
        "mods = [re, json, collections, datetime, functools]\n"
        "print(sum(1 for m in mods for n in dir(m) if type(getattr(m, n)).__name__ == 'module'))"
    )
    assert ok(code) == "0\n"  # type names are readable; no attribute of a stand-in is a module
    assert (
        ok("import re, json\nprint([n for n in dir(re) + dir(json) if n in ('enum', 'sys', 'codecs', 'os')])")
        == "[]\n"
    )
    outcome = run("import json\njson.loads = len")
    assert outcome.error is not None and "cannot assign" in outcome.error


def test_output_is_bounded_by_head_and_tail() -> None:
    interp = Interpreter({}, output_limit=1000)
    outcome = interp.run("for i in range(10000):\n    print(i)")
    assert outcome.error is None
    assert outcome.output.startswith("0\n1\n2\n")
    assert outcome.output.endswith("9998\n9999\n")
    assert "characters omitted" in outcome.output
    assert len(outcome.output) < 1200


def test_libraries_writing_to_stdout_are_captured() -> None:
    # base64.encode writes to the file object it is given; sys.stdout is the cell buffer.
    import sys

    before = sys.stdout
    outcome = run("print('a', flush=True)")
    assert outcome.output == "a\n"
    assert sys.stdout is before


def test_an_import_refused_while_a_cell_runs_is_recorded_as_ours() -> None:
    """Model code cannot name a module outside the list (refused when compiled) nor call
    __import__, so a refusal by the import guard while a cell runs comes from the C code of an
    allowed module importing as it runs (the real time.strptime does): the worker reports it
    to the parent as an internal error. Here the C function is handed to the cell directly."""
    import time

    from rlm.sandbox.worker import policy

    policy.REFUSED_AT_RUN_TIME.clear()
    outcome = run("print(c_strptime('2024', '%Y').tm_year)", make(c_strptime=time.strptime))
    assert outcome.error is not None and "import of '_strptime' is not allowed" in outcome.error
    assert policy.REFUSED_AT_RUN_TIME == ["_strptime"]
    policy.REFUSED_AT_RUN_TIME.clear()
    # The sandbox's own time.strptime does not import; a refusal the model's code makes is not ours.
    assert ok("import time\nprint(time.strptime('2024', '%Y').tm_year)") == "2024\n"
    assert "not allowed" in (run("import os").error or "")
    assert policy.REFUSED_AT_RUN_TIME == []
