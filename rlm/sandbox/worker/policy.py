"""The language layer of the sandbox: what model-written Python may do.

Imported only by the worker process (stdlib + RestrictedPython). Cells are
compiled with a RestrictedPython policy tuned for analysts' code and run in
one persistent namespace. Every attribute read goes through a guard, every
attribute/item write through another, and the only importable modules are
read-only stand-ins that expose public, non-module attributes minus known
gadgets. This layer is one of several: the kernel layer (oslimits) and the
parent (client) catch what a hole here would let through.

Over 400 lines on purpose: the policy is one security boundary, reviewed as a whole.
"""

from __future__ import annotations

import _string  # C helper behind str.format's field parsing
import _strptime  # type: ignore[import-not-found]  # behind time.strptime (see _time_strptime)
import ast
import collections
import datetime
import decimal
import hashlib
import importlib
import operator
import random
import re
import string
import sys
import time
import types
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from RestrictedPython.transformer import INSPECT_ATTRIBUTES, RestrictingNodeTransformer

from rlm.sandbox.worker.modules import ALLOWED_MODULES

__all__ = ["ALLOWED_MODULES", "CellOutcome", "Interpreter"]

_ModuleType = types.ModuleType
_MISSING = object()


# ---------------------------------------------------------------------------
# Read-only module stand-ins
# ---------------------------------------------------------------------------


class ModuleView:
    """A read-only stand-in for a whitelisted module.

    It deliberately has no ``__name__``: CPython's ``from X import y`` falls
    back to ``sys.modules[X.__name__ + '.y']`` when the attribute is missing,
    which would hand out real submodules such as ``json.decoder``.
    Attributes live in the instance ``__dict__`` so the hot path
    (``re.search`` in a loop) is a plain C-level lookup.
    """

    def __init__(self, label: str, attrs: Mapping[str, object]) -> None:
        object.__setattr__(self, "_ModuleView__label", label)
        self.__dict__.update(attrs)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"module {self.__label!r} has no attribute {name!r} in this sandbox")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"module {self.__label!r} is read-only in this sandbox")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"module {self.__label!r} is read-only in this sandbox")

    def __dir__(self) -> list[str]:
        return sorted(k for k in self.__dict__ if not k.startswith("_"))

    def __repr__(self) -> str:
        return f"<module {self.__label!r} (sandboxed)>"

    def __reduce__(self) -> Any:  # never copy/pickle a view into something else
        raise TypeError("sandboxed modules cannot be copied")


# Known gadgets: public attributes that reach code execution, attribute
# traversal by string, real modules, files, or the worker's own stdin.
_GADGETS: dict[str, frozenset[str]] = {
    # attrgetter/methodcaller traverse attributes named by strings; setitem/delitem
    # write through objects without the write guard.
    "operator": frozenset({"attrgetter", "methodcaller", "setitem", "delitem"}),
    # Formatter.get_field walks "{0.__class__...}" with the real getattr.
    "string": frozenset({"Formatter"}),
    # singledispatch evaluates string annotations (get_type_hints); update_wrapper/
    # wraps copy arbitrary dunder attributes (e.g. __globals__) between objects.
    "functools": frozenset(
        {"singledispatch", "singledispatchmethod", "update_wrapper", "wraps", "RLock", "GenericAlias"}
    ),
    # FunctionType builds functions from code objects; make_dataclass takes a raw
    # class namespace.
    "dataclasses": frozenset({"FunctionType", "GenericAlias", "make_dataclass"}),
    # A PyCapsule holding C function pointers.
    "datetime": frozenset({"datetime_CAPI"}),
    # main()/test() read sys.argv and stdin: stdin is the worker's protocol pipe.
    "base64": frozenset({"main", "test"}),
}

# Modules exposed through an explicit list instead (most of their surface is
# files, processes, clocks that change global state, or eval of strings).
_EXPLICIT: dict[str, tuple[str, ...]] = {
    "io": ("StringIO", "BytesIO"),
    "time": (
        "time",
        "time_ns",
        "monotonic",
        "monotonic_ns",
        "perf_counter",
        "perf_counter_ns",
        "process_time",
        "gmtime",
        "localtime",
        "mktime",
        "strftime",
        "strptime",
        "asctime",
        "ctime",
        "struct_time",
        "timezone",
        "altzone",
        "daylight",
        "tzname",
    ),
    # get_type_hints/ForwardRef evaluate strings; Type/ABCMeta/NamedTupleMeta are
    # metaclasses (arbitrary class namespaces); Protocol and runtime_checkable
    # are not needed for analysis code.
    "typing": (
        "Any",
        "Callable",
        "ClassVar",
        "Counter",
        "DefaultDict",
        "Deque",
        "Dict",
        "Final",
        "FrozenSet",
        "Generator",
        "Generic",
        "Hashable",
        "Iterable",
        "Iterator",
        "List",
        "Literal",
        "Mapping",
        "MutableMapping",
        "MutableSequence",
        "NamedTuple",
        "Optional",
        "OrderedDict",
        "Sequence",
        "Set",
        "Sized",
        "Tuple",
        "TypedDict",
        "TypeVar",
        "Union",
        "cast",
        "TYPE_CHECKING",
    ),
}

_SOURCE_MODULES: dict[str, _ModuleType] = {name: importlib.import_module(name) for name in ALLOWED_MODULES}


def _public_attrs(name: str, module: _ModuleType) -> dict[str, object]:
    if name in _EXPLICIT:
        return {attr: getattr(module, attr) for attr in _EXPLICIT[name]}
    banned = _GADGETS.get(name, frozenset())
    out: dict[str, object] = {}
    for attr, value in vars(module).items():
        if attr.startswith("_") or attr in banned or isinstance(value, _ModuleType):
            continue
        out[attr] = value
    return out


def _re_attrs() -> dict[str, object]:
    """`re` whose functions also take the lazy `context` of a big file (rlm.text.textfile.LazyText)."""
    from rlm.text import textfile

    attrs = _public_attrs("re", re)
    for name in ("compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"):
        attrs[name] = getattr(textfile, f"re_{name}")
    return attrs


def _time_strptime(string: str, format: str = "%a %b %d %H:%M:%S %Y") -> time.struct_time:  # noqa: A002
    """time.strptime, as the C function does it, minus its import: the C function imports
    _strptime on every call through the caller's __import__, which in a cell is the guard."""
    result: time.struct_time = _strptime._strptime_time(string, format)
    return result


def _time_attrs() -> dict[str, object]:
    attrs = _public_attrs("time", time)
    attrs["strptime"] = _time_strptime
    return attrs


def _build_views() -> dict[str, ModuleView]:
    views = {name: ModuleView(name, _public_attrs(name, mod)) for name, mod in _SOURCE_MODULES.items()}
    views["re"] = ModuleView("re", _re_attrs())
    views["time"] = ModuleView("time", _time_attrs())
    # `import urllib.parse` binds the package: give it a view holding only `parse`.
    views["urllib"] = ModuleView("urllib", {"parse": views["urllib.parse"]})
    return views


_VIEWS: dict[str, ModuleView] = _build_views()
_ALLOWED_TEXT = ", ".join(ALLOWED_MODULES)


def _warm_up() -> None:
    """Load what the allowed modules import lazily, before the kernel layer
    (Landlock) makes every file unreadable."""
    datetime.datetime.strptime("2024-01-02 03:04:05", "%Y-%m-%d %H:%M:%S")
    time.strptime("2024", "%Y")
    for enc in ("utf-8", "latin-1", "ascii", "utf-16", "utf-32", "cp1252", "idna", "unicode_escape"):
        "x".encode(enc)
    for algo in ("md5", "sha1", "sha256", "sha3_256", "blake2b"):
        hashlib.new(algo, b"x").hexdigest()
    decimal.Decimal("1.10").quantize(decimal.Decimal("0.1"))
    random.Random(0).random()


_warm_up()


# ---------------------------------------------------------------------------
# Guards called by the compiled code
# ---------------------------------------------------------------------------


def _refuse_private(name: str) -> AttributeError:
    return AttributeError(
        f'access to attribute "{name}" is not allowed: names starting with "_" are blocked in this sandbox'
    )


class _GuardedFormatter(string.Formatter):
    """str.format with every "{0.attr}" / "{0[key]}" step going through the guard."""

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        first, rest = _string.formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, key in rest:
            obj = guarded_getattr(obj, key) if is_attr else obj[key]
        return obj, first


_FORMATTER = _GuardedFormatter()


def _needs_guarded_format(fmt: str) -> bool:
    for _literal, field, spec, _conv in _string.formatter_parser(fmt):
        if field and ("." in field or "[" in field):
            return True
        if spec and "{" in spec:
            return True
    return False


def safe_format(fmt: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    if type(fmt) is str and not _needs_guarded_format(fmt):
        return fmt.format(*args, **kwargs)
    return _FORMATTER.vformat(str.__str__(fmt), args, kwargs)


def _bound_format(fmt: str) -> Callable[..., str]:
    def format(*args: Any, **kwargs: Any) -> str:  # noqa: A001 - mirrors str.format
        return safe_format(fmt, args, kwargs)

    return format


def _bound_format_map(fmt: str) -> Callable[[Mapping[str, Any]], str]:
    def format_map(mapping: Mapping[str, Any]) -> str:
        return _FORMATTER.vformat(str.__str__(fmt), (), mapping)

    return format_map


def _unbound_format(fmt: str, *args: Any, **kwargs: Any) -> str:
    if not isinstance(fmt, str):
        raise TypeError("str.format needs a str as first argument")
    return safe_format(fmt, args, kwargs)


def _unbound_format_map(fmt: str, mapping: Mapping[str, Any]) -> str:
    if not isinstance(fmt, str):
        raise TypeError("str.format_map needs a str as first argument")
    return _FORMATTER.vformat(str.__str__(fmt), (), mapping)


_BLOCKED_ATTRS = frozenset(INSPECT_ATTRIBUTES) | {"mro"}
_SPECIAL_ATTRS = frozenset({"format", "format_map", "obj"})


def _special_getattr(obj: Any, name: str, default: Any) -> Any:
    if name in ("format", "format_map"):
        if isinstance(obj, str):
            return _bound_format(obj) if name == "format" else _bound_format_map(obj)
        if isinstance(obj, type) and issubclass(obj, str):
            return _unbound_format if name == "format" else _unbound_format_map
    if name == "obj" and isinstance(obj, BaseException):
        # AttributeError.obj can carry an internal object (CVE-2024-47532).
        raise AttributeError('"obj" of exceptions is not available in this sandbox')
    return _plain_getattr(obj, name, default)


def _plain_getattr(obj: Any, name: str, default: Any) -> Any:
    if type(obj) is _ModuleType:
        raise AttributeError("real module objects are not accessible in this sandbox")
    value = getattr(obj, name) if default is _MISSING else getattr(obj, name, default)
    if type(value) is _ModuleType:
        raise AttributeError(f'attribute "{name}" is a module; modules are only available through import')
    return value


# Dunder attributes model code may read: names, as in `type(e).__name__`, the most
# common exception idiom. Only a plain str is ever handed back.
READABLE_DUNDERS = frozenset({"__name__", "__qualname__"})


def _read_dunder(obj: Any, name: str, default: Any) -> Any:
    value = getattr(obj, name, _MISSING)
    if type(value) is str:
        return value
    if default is not _MISSING:
        return default
    raise AttributeError(f'this object has no readable "{name}" in this sandbox')


def guarded_getattr(obj: Any, name: str, default: Any = _MISSING) -> Any:
    """`_getattr_` and the sandbox's `getattr`: every `a.b` in a cell comes here."""
    if type(name) is not str:
        raise TypeError("attribute name must be a string")
    if name[:1] == "_":
        if name in READABLE_DUNDERS and type(obj) is not _ModuleType:
            return _read_dunder(obj, name, default)
        raise _refuse_private(name)
    if name in _BLOCKED_ATTRS:
        raise AttributeError(f'attribute "{name}" is not allowed in this sandbox (frame/code introspection)')
    if name in _SPECIAL_ATTRS:
        return _special_getattr(obj, name, default)
    return _plain_getattr(obj, name, default)


def _guarded_hasattr(obj: Any, name: str) -> bool:
    try:
        guarded_getattr(obj, name)
    except AttributeError:
        return False
    return True


# Modules the import guard refused while a cell ran (see _guarded_import); the worker
# reports them to the parent as internal errors and clears the list.
REFUSED_AT_RUN_TIME: list[str] = []


def _guarded_import(
    name: str,
    globals: Any = None,  # noqa: A002 - signature of builtins.__import__
    locals: Any = None,  # noqa: A002
    fromlist: Any = (),
    level: int = 0,
) -> ModuleView:
    if level != 0:
        raise ImportError("relative imports are not allowed in this sandbox")
    view = _VIEWS.get(name) if type(name) is str else None
    if view is None and type(name) is str:
        # Model code cannot name such a module (the compile step refuses it) nor call __import__:
        # this is the C code of an allowed module importing as it runs, a defect of ours.
        REFUSED_AT_RUN_TIME.append(name)
    if view is None or name == "urllib" and not fromlist:
        raise ImportError(f"import of {name!r} is not allowed; allowed modules: {_ALLOWED_TEXT}")
    if "." in name and not fromlist:
        return _VIEWS[name.split(".", 1)[0]]
    return view


_REAL_TYPE = type


def _sandbox_type(obj: Any, *more: Any) -> Any:
    """`type(x)` only: the three-argument form builds classes from a raw
    namespace dict (arbitrary dunders), and the real metaclass is never
    handed out."""
    if more:
        raise TypeError("type() with three arguments is not allowed in this sandbox; use a class statement")
    result = _REAL_TYPE(obj)
    if issubclass(result, _REAL_TYPE):
        return _sandbox_type
    return result


def _refusal(what: str, why: str) -> Callable[..., Any]:
    def refused(*_args: Any, **_kwargs: Any) -> Any:
        raise PermissionError(f"{what} is not available in this sandbox: {why}")

    refused.__name__ = what.split("(")[0]
    return refused


_NO_FILES = (
    "there is no file access; the input is already loaded as `context` (str) "
    "and `context_lines` (list of lines without line endings)"
)
_NO_CODEGEN = "code cannot create or run other code; write the code directly in the cell"

_REFUSED_BUILTINS: dict[str, Callable[..., Any]] = {
    "open": _refusal("open()", _NO_FILES),
    "input": _refusal("input()", "there is no stdin"),
    "exec": _refusal("exec()", _NO_CODEGEN),
    "eval": _refusal("eval()", _NO_CODEGEN),
    "compile": _refusal("compile()", _NO_CODEGEN),
    "breakpoint": _refusal("breakpoint()", "there is no debugger"),
    "help": _refusal("help()", "there is no interactive help; use dir(obj)"),
    "globals": _refusal("globals()", "the namespace is not inspectable; use dir()"),
    "locals": _refusal("locals()", "the namespace is not inspectable; use dir()"),
    "vars": _refusal("vars()", "the namespace is not inspectable; use dir(obj)"),
    "exit": _refusal("exit()", "a cell ends when its code ends"),
    "quit": _refusal("quit()", "a cell ends when its code ends"),
    "memoryview": _refusal("memoryview()", "raw buffers are not needed for analysis"),
}

_PLAIN_BUILTINS = (
    "abs all any ascii bin bool bytearray bytes callable chr classmethod complex dict divmod "
    "enumerate filter float format frozenset hash hex id int isinstance issubclass iter len list "
    "map max min next object oct ord pow property range repr reversed round set slice sorted "
    "staticmethod str sum super tuple zip None False True Ellipsis NotImplemented"
).split()

_EXCEPTIONS = (
    "ArithmeticError AssertionError AttributeError BaseException BufferError EOFError Exception "
    "FloatingPointError GeneratorExit ImportError IndexError KeyError KeyboardInterrupt LookupError "
    "MemoryError ModuleNotFoundError NameError NotImplementedError OSError OverflowError "
    "PermissionError RecursionError ReferenceError RuntimeError StopIteration SyntaxError "
    "SystemExit TimeoutError TypeError UnboundLocalError UnicodeDecodeError UnicodeEncodeError "
    "UnicodeError ValueError ZeroDivisionError Warning UserWarning DeprecationWarning "
    "RuntimeWarning FileNotFoundError LookupError"
).split()

# Methods a user class may define besides plain names. Not allowed: __del__
# (runs at arbitrary times outside a cell), __getattr(ibute)__/__setattr__,
# __init_subclass__/__set_name__/__class_getitem__ and descriptors.
_ALLOWED_MAGIC = frozenset(
    {
        "__init__",
        "__post_init__",
        "__repr__",
        "__str__",
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__hash__",
        "__len__",
        "__iter__",
        "__next__",
        "__contains__",
        "__getitem__",
        "__setitem__",
        "__bool__",
        "__call__",
        "__enter__",
        "__exit__",
        "__add__",
        "__radd__",
        "__sub__",
        "__mul__",
        "__truediv__",
    }
)

_INPLACE: dict[str, Callable[[Any, Any], Any]] = {
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "**=": operator.ipow,
    "<<=": operator.ilshift,
    ">>=": operator.irshift,
    "|=": operator.ior,
    "^=": operator.ixor,
    "&=": operator.iand,
    "@=": operator.imatmul,
}
_OP_TEXT = {
    ast.Add: "+=",
    ast.Sub: "-=",
    ast.Mult: "*=",
    ast.Div: "/=",
    ast.FloorDiv: "//=",
    ast.Mod: "%=",
    ast.Pow: "**=",
    ast.LShift: "<<=",
    ast.RShift: ">>=",
    ast.BitOr: "|=",
    ast.BitXor: "^=",
    ast.BitAnd: "&=",
    ast.MatMult: "@=",
}


# ---------------------------------------------------------------------------
# Compile-time policy
# ---------------------------------------------------------------------------


class _SandboxPolicy(RestrictingNodeTransformer):
    """RestrictedPython's checks, loosened where analysts need it and where
    the guard it adds is a no-op for us (iteration/unpacking/item reads have
    no access control here), tightened for import names."""

    def check_name(self, node: Any, name: str | None, allow_magic_methods: bool = False) -> None:
        if (
            name is not None
            and allow_magic_methods
            and name in _ALLOWED_MAGIC
            and getattr(node, "col_offset", 0) != 0
        ):
            return
        super().check_name(node, name, allow_magic_methods=False)

    # Iteration and unpacking run natively: `_getiter_` would be the identity.
    def guard_iter(self, node: Any) -> Any:
        return self.node_contents_visit(node)

    def visit_Assign(self, node: ast.Assign) -> Any:
        return self.node_contents_visit(node)

    def visit_With(self, node: ast.With) -> Any:
        return self.node_contents_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> Any:
        return self.node_contents_visit(node)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> Any:
        for name in node.names:
            self.check_name(node, name)
        return node

    def visit_Call(self, node: ast.Call) -> Any:
        if isinstance(node.func, ast.Name) and node.func.id in ("exec", "eval"):
            self.error(node, f"{node.func.id}() is not allowed: {_NO_CODEGEN}.")
        # Star-args run natively; no `_apply_` wrapper is needed.
        return self.node_contents_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> Any:
        node = self.node_contents_visit(node)
        if isinstance(node.ctx, ast.Load):
            return node  # item reads carry no access control here
        wrapped = ast.Call(func=ast.Name("_write_", ast.Load()), args=[node.value], keywords=[])
        ast.copy_location(wrapped, node.value)
        node.value = wrapped
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> Any:
        target = node.target
        if isinstance(target, ast.Name):
            # `n += 1` on a name is no more powerful than `n = n + 1`.
            self.check_name(target, target.id)
            node.value = self.visit(node.value)
            return node
        if isinstance(target, ast.Subscript):
            node.target = self.visit(target)  # -> _write_(obj)[key] (op)= value
            node.value = self.visit(node.value)
            return node
        if isinstance(target, ast.Attribute):
            # obj.attr op= v  ->  _aug_attr_(obj, "attr", "op", v): read and
            # write both go through the guards.
            self._check_attr_name(target, target.attr)
            call = ast.Call(
                func=ast.Name("_aug_attr_", ast.Load()),
                args=[
                    self.visit(target.value),
                    ast.Constant(target.attr),
                    ast.Constant(_OP_TEXT[type(node.op)]),
                    self.visit(node.value),
                ],
                keywords=[],
            )
            new = ast.Expr(call)
            ast.copy_location(new, node)
            return ast.fix_missing_locations(new)
        return self.not_allowed(node)

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        if node.attr in READABLE_DUNDERS and isinstance(node.ctx, ast.Load):
            # Read through the guard like any attribute (RestrictedPython refuses every "_" name).
            node = self.node_contents_visit(node)
            call = ast.Call(
                func=ast.Name("_getattr_", ast.Load()),
                args=[node.value, ast.Constant(node.attr)],
                keywords=[],
            )
            ast.copy_location(call, node)
            return ast.fix_missing_locations(call)
        return super().visit_Attribute(node)

    def _check_attr_name(self, node: ast.AST, attr: str) -> None:
        if attr.startswith("_"):
            self.error(node, f'"{attr}" is an invalid attribute name because it starts with "_".')
        elif attr in INSPECT_ATTRIBUTES:
            self.error(
                node, f'"{attr}" is a restricted name, that is forbidden to access in RestrictedPython.'
            )

    def check_import_names(self, node: ast.Import | ast.ImportFrom) -> Any:
        if isinstance(node, ast.ImportFrom):
            modules = [node.module or ""] if node.level == 0 else []
            if node.level:
                self.error(node, "relative imports are not allowed.")
        else:
            modules = [alias.name for alias in node.names]
        for module in modules:
            if module not in _VIEWS:
                self.error(node, f"import of {module!r} is not allowed; allowed modules: {_ALLOWED_TEXT}.")
            elif isinstance(node, ast.ImportFrom):
                available = _VIEWS[module].__dict__
                for alias in node.names:
                    if alias.name != "*" and alias.name not in available:
                        self.error(
                            node,
                            f"{alias.name!r} is not available from {module!r} in this sandbox "
                            "(only public functions, classes and constants of allowed modules are).",
                        )
        return super().check_import_names(node)

    def visit_Match(self, node: ast.AST) -> Any:
        # Class patterns read attributes natively (no guard), so `match` is refused.
        self.error(node, "match statements are not allowed in this sandbox; use if/elif.")


# ---------------------------------------------------------------------------
# Output collection
# ---------------------------------------------------------------------------


class _OutputBuffer:
    """Collects everything a cell prints. Keeps the head and the tail once
    the text passes `limit` characters, so a print loop cannot exhaust memory;
    the omitted length is stated in the text."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._tail_limit = limit // 4
        self.reset()

    def reset(self) -> None:
        self._head: list[str] = []
        self._head_len = 0
        self._tail: list[str] = []
        self._tail_len = 0
        self._dropped = 0

    def write(self, text: str) -> int:
        if type(text) is not str:
            text = str.__str__(text) if isinstance(text, str) else str(text)
        n = len(text)
        room = self._limit - self._tail_limit - self._head_len
        if room > 0 and not self._tail:
            part = text[:room]
            self._head.append(part)
            self._head_len += len(part)
            text = text[room:]
            if not text:
                return n
        self._tail.append(text)
        self._tail_len += len(text)
        if self._tail_len > 2 * self._tail_limit:
            joined = "".join(self._tail)
            self._dropped += len(joined) - self._tail_limit
            self._tail = [joined[-self._tail_limit :]]
            self._tail_len = self._tail_limit
        return n

    def flush(self) -> None:
        return None

    def getvalue(self) -> str:
        head = "".join(self._head)
        tail = "".join(self._tail)
        dropped = self._dropped
        if dropped and len(tail) > self._tail_limit:
            dropped += len(tail) - self._tail_limit
            tail = tail[-self._tail_limit :]
        if not dropped:
            return head + tail
        return f"{head}\n[... {dropped} characters omitted ...]\n{tail}"

    # `print` inside cells is rewritten to `_print._call_print(...)` where
    # `_print = _print_(_getattr_)`; this object is both factory result and sink.
    def _call_print(self, *objects: Any, **kwargs: Any) -> None:
        target = kwargs.get("file")
        if target is None:
            kwargs["file"] = self
        else:
            guarded_getattr(target, "write")
        print(*objects, **kwargs)


# ---------------------------------------------------------------------------
# The interpreter
# ---------------------------------------------------------------------------


@dataclass
class CellOutcome:
    output: str
    error: str | None


class _Refused(Exception):
    pass


_MAX_MESSAGE = 2000
_MAX_FRAMES = 3


class Interpreter:
    """A persistent restricted namespace; `run` executes one cell."""

    def __init__(self, protected: Mapping[str, object], *, output_limit: int = 4_000_000) -> None:
        self._protected = dict(protected)
        self._protected_ids = frozenset(id(v) for v in self._protected.values())
        self._user_classes: weakref.WeakSet[type] = weakref.WeakSet()
        self._out = _OutputBuffer(output_limit)
        self._sources: dict[str, list[str]] = {}
        self._cell = 0
        self._builtins = self._make_builtins()
        self.namespace: dict[str, Any] = {"__builtins__": self._builtins, "__name__": "__sandbox__"}

    # -- public ------------------------------------------------------------

    @property
    def protected(self) -> dict[str, object]:
        """The names re-injected before every cell; assign to replace them
        (e.g. to add `context` only for the cells that use it)."""
        return dict(self._protected)

    @protected.setter
    def protected(self, value: Mapping[str, object]) -> None:
        self._protected = dict(value)
        self._protected_ids = frozenset(id(v) for v in self._protected.values())

    def update_protected(self, names: Mapping[str, object]) -> None:
        """Add or replace protected names (e.g. `context`, bound only for cells that use it)."""
        self._protected.update(names)
        self._protected_ids = frozenset(id(v) for v in self._protected.values())

    def run(self, code: str) -> CellOutcome:
        self._cell += 1
        filename = f"<cell {self._cell}>"
        self._sources[filename] = code.splitlines()
        self._out.reset()
        try:
            compiled = self._compile(code, filename)
        except _Refused as refused:
            return CellOutcome(output="", error=str(refused))
        self.namespace["__builtins__"] = self._builtins
        self.namespace.update(self._protected)
        error: str | None = None
        saved = sys.stdout, sys.stderr, sys.unraisablehook
        sys.stdout = sys.stderr = self._out  # libraries that print must not reach the protocol pipe
        sys.unraisablehook = self._unraisable
        try:
            exec(compiled, self.namespace)
        except BaseException as exc:  # noqa: BLE001 - user code may raise anything, SystemExit included
            error = self._describe(exc, filename)
        finally:
            sys.stdout, sys.stderr, sys.unraisablehook = saved
        return CellOutcome(output=self._out.getvalue(), error=error)

    def _unraisable(self, info: Any) -> None:
        """An exception in a finalizer (e.g. a generator's `finally` run by the
        garbage collector): say so in one line, without the interpreter's
        traceback of internal frames."""
        exc = info.exc_value
        try:
            text = f"{_REAL_TYPE(exc).__name__}: {exc}" if exc is not None else "unknown error"
        except BaseException:  # noqa: BLE001 - a user __str__ may raise anything
            text = _REAL_TYPE(exc).__name__
        self._out.write(f"[an exception in a finalizer was ignored: {text[:_MAX_MESSAGE]}]\n")

    # -- compile -----------------------------------------------------------

    def _compile(self, code: str, filename: str) -> types.CodeType:
        try:
            tree = ast.parse(code, filename, "exec")
        except SyntaxError as exc:
            line = exc.lineno or 0
            raise _Refused(self._with_line(f"SyntaxError: {exc.msg} (line {line})", filename, line)) from None
        except (ValueError, RecursionError, MemoryError) as exc:
            raise _Refused(f"SyntaxError: the cell cannot be parsed: {exc}") from None
        errors: list[str] = []
        policy = _SandboxPolicy(errors, [], {})
        try:
            tree = policy.visit(tree)
        except RecursionError:
            raise _Refused("SyntaxError: the cell is nested too deeply to be checked") from None
        if errors:
            first = errors[0]
            match = re.match(r"Line (\d+): (.*)", first, re.S)
            line = int(match.group(1)) if match else 0
            text = match.group(2) if match else first
            text = text.replace(
                ", that is forbidden to access in RestrictedPython.",
                ": frame and code introspection is not allowed in this sandbox.",
            )
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise _Refused(
                self._with_line(f"PolicyError: refused by the sandbox: {text}{more}", filename, line)
            )
        body = tree.body
        if body and isinstance(body[-1], ast.Expr):
            last = body[-1]
            show = ast.Expr(ast.Call(func=ast.Name("_show_", ast.Load()), args=[last.value], keywords=[]))
            body[-1] = ast.fix_missing_locations(ast.copy_location(show, last))
        try:
            return compile(ast.fix_missing_locations(tree), filename, "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            raise _Refused(f"SyntaxError: {exc}") from None

    # -- errors ------------------------------------------------------------

    def _with_line(self, text: str, filename: str, line: int) -> str:
        src = self._source_line(filename, line)
        return f"{text}\n  at line {line}: {src}" if src else text

    def _source_line(self, filename: str, line: int) -> str:
        lines = self._sources.get(filename)
        if not lines or line < 1 or line > len(lines):
            return ""
        return lines[line - 1].strip()[:300]

    def _describe(self, exc: BaseException, current: str) -> str:
        name = _REAL_TYPE(exc).__name__
        try:
            message = str(exc)
            if type(message) is not str:
                message = str.__str__(message)
        except BaseException:  # noqa: BLE001 - a user __str__ may raise anything
            message = "<message could not be shown>"
        if len(message) > _MAX_MESSAGE:
            message = message[:_MAX_MESSAGE] + f"... [{len(message) - _MAX_MESSAGE} more characters]"
        if isinstance(exc, SystemExit):
            head = f"SystemExit({message}): the cell stopped early; the sandbox keeps running"
        elif isinstance(exc, KeyboardInterrupt):
            head = "KeyboardInterrupt: the cell was interrupted"
        else:
            head = f"{name}: {message}" if message else name
        frames: list[tuple[str, int, str]] = []
        tb = exc.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename in self._sources:
                frames.append((code.co_filename, tb.tb_lineno, code.co_name))
            tb = tb.tb_next
        exc.__traceback__ = None  # frames hold user objects alive
        lines = [head]
        skipped = len(frames) - _MAX_FRAMES
        if skipped > 0:
            lines.append(f"  ... {skipped} earlier frames ...")
        for filename, lineno, func in frames[-_MAX_FRAMES:]:
            where = f"line {lineno}" if filename == current else f"line {lineno} of {filename.strip('<>')}"
            if func != "<module>":
                where += f", in {func}"
            lines.append(f"  at {where}: {self._source_line(filename, lineno)}")
        return "\n".join(lines)

    # -- builtins and guards -------------------------------------------------

    def _make_builtins(self) -> dict[str, Any]:
        import builtins

        table: dict[str, Any] = {name: getattr(builtins, name) for name in _PLAIN_BUILTINS}
        table.update({name: getattr(builtins, name) for name in _EXCEPTIONS})
        table.update(_REFUSED_BUILTINS)
        out = self._out
        user_classes = self._user_classes
        writable_exact = frozenset({dict, list, bytearray, collections.defaultdict, collections.Counter})
        writable_any = (dict, list, bytearray, collections.deque, collections.UserDict, collections.UserList)

        def guarded_write(ob: Any) -> Any:
            if id(ob) in self._protected_ids:
                raise TypeError("the sandbox's own objects (context, helpers) are read-only")
            t = _REAL_TYPE(ob)
            if t in writable_exact or t in user_classes or isinstance(ob, writable_any):
                return ob
            if isinstance(ob, _REAL_TYPE) and ob in user_classes:
                return ob
            raise TypeError(
                f"cannot assign to attributes or items of {t.__name__} objects in this sandbox "
                "(only your own dicts, lists and class instances can be modified)"
            )

        def aug_attr(ob: Any, name: str, op: str, value: Any) -> None:
            target = guarded_write(ob)
            setattr(target, name, _INPLACE[op](guarded_getattr(ob, name), value))

        def guarded_setattr(ob: Any, name: str, value: Any) -> None:
            if type(name) is not str or name.startswith("_"):
                raise _refuse_private(str(name))
            setattr(guarded_write(ob), name, value)

        def guarded_delattr(ob: Any, name: str) -> None:
            if type(name) is not str or name.startswith("_"):
                raise _refuse_private(str(name))
            delattr(guarded_write(ob), name)

        def make_class(name: str, bases: tuple[Any, ...], ns: dict[str, Any], **kwargs: Any) -> type:
            meta: type = _REAL_TYPE
            for base in bases:
                if isinstance(base, _REAL_TYPE) and issubclass(base, _REAL_TYPE):
                    raise TypeError("metaclasses are not allowed in this sandbox")
                base_meta = _REAL_TYPE(base)
                if issubclass(base_meta, meta):
                    meta = base_meta
                elif not issubclass(meta, base_meta):
                    raise TypeError(f"class {name}: bases with incompatible metaclasses")
            cls: type = meta(name, bases, ns, **kwargs)
            user_classes.add(cls)
            return cls

        def show(value: Any) -> None:
            if value is None:
                return
            text = repr(value)
            if type(text) is not str:
                text = str.__str__(text)
            out.write(text + "\n")

        def sandbox_dir(*args: Any) -> list[str]:
            if len(args) > 1:
                raise TypeError("dir expected at most 1 argument")
            names = dir(args[0]) if args else list(self.namespace)
            return sorted(n for n in names if not n.startswith("_"))

        table.update(
            {
                "__build_class__": builtins.__build_class__,
                "__import__": _guarded_import,
                "__metaclass__": make_class,
                "type": _sandbox_type,
                "dir": sandbox_dir,
                "getattr": guarded_getattr,
                "hasattr": _guarded_hasattr,
                "setattr": guarded_setattr,
                "delattr": guarded_delattr,
                "_getattr_": guarded_getattr,
                "_write_": guarded_write,
                "_aug_attr_": aug_attr,
                "_print_": lambda _getattr=None: out,
                "_show_": show,
            }
        )
        return table
