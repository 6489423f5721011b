"""The sandbox's language policy: what model-written Python may do (RestrictedPython).

The boundary: cells are compiled under a RestrictedPython policy tuned for
analysts' code (`restrict`); every attribute read goes through a guard, every
attribute/item write through another, and the builtins a cell sees are these
guards, the harmless builtins and refusals that say why (`make_builtins`).
`import` hands out only the read-only stand-ins of rlm.sandbox.worker.stand_ins.
Running a cell, its output and its namespace are rlm.sandbox.worker.interpreter.
This layer is one of several: the kernel layer (oslimits) and the parent
(client) catch what a hole here would let through.

Imported only by the worker process (stdlib + RestrictedPython), before lock-down.
Over 400 lines on purpose: the guards and the compile-time checks are one
security boundary, reviewed as a whole.
"""

from __future__ import annotations

import _string  # C helper behind str.format's field parsing
import ast
import builtins
import collections
import operator
import string
import types
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from RestrictedPython.transformer import INSPECT_ATTRIBUTES, RestrictingNodeTransformer

from rlm.sandbox.worker.modules import ALLOWED_MODULES
from rlm.sandbox.worker.stand_ins import ALLOWED_TEXT, VIEWS, ModuleView

__all__ = [
    "ALLOWED_MODULES",
    "READABLE_DUNDERS",
    "REFUSED_AT_RUN_TIME",
    "CellState",
    "guarded_getattr",
    "make_builtins",
    "restrict",
]

_ModuleType = types.ModuleType
_MISSING = object()


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
    view = VIEWS.get(name) if type(name) is str else None
    if view is None and type(name) is str:
        # Model code cannot name such a module (the compile step refuses it) nor call __import__:
        # this is the C code of an allowed module importing as it runs, a defect of ours.
        REFUSED_AT_RUN_TIME.append(name)
    if view is None or name == "urllib" and not fromlist:
        raise ImportError(f"import of {name!r} is not allowed; allowed modules: {ALLOWED_TEXT}")
    if "." in name and not fromlist:
        return VIEWS[name.split(".", 1)[0]]
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
            if module not in VIEWS:
                self.error(node, f"import of {module!r} is not allowed; allowed modules: {ALLOWED_TEXT}.")
            elif isinstance(node, ast.ImportFrom):
                available = VIEWS[module].__dict__
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


def restrict(tree: ast.Module) -> tuple[ast.Module, list[str]]:
    """A cell's parsed code under the policy: the tree with the guards' calls put in, and what
    the policy refuses in it ("Line N: why", in RestrictedPython's words). RecursionError on a
    tree nested too deeply to check."""
    errors: list[str] = []
    checked = _SandboxPolicy(errors, [], {}).visit(tree)
    return checked, errors


# ---------------------------------------------------------------------------
# The builtins a cell sees: the guards the compiled code calls, and the refusals
# ---------------------------------------------------------------------------


class CellState(Protocol):
    """What the guards read of the interpreter they guard, as it is at each call."""

    @property
    def protected_ids(self) -> frozenset[int]:
        """ids of the sandbox's own objects (context, helpers): never written to."""

    @property
    def namespace(self) -> dict[str, Any]:
        """The persistent namespace, listed by a bare dir()."""


def make_builtins(state: CellState, out: Any, user_classes: weakref.WeakSet[type]) -> dict[str, Any]:
    """The `__builtins__` of a cell: plain builtins, the refused ones, and the guards.

    `out` receives what a cell prints and the echo of its last expression;
    classes the cell defines are added to `user_classes` (their instances are
    writable, other objects are not)."""
    table: dict[str, Any] = {name: getattr(builtins, name) for name in _PLAIN_BUILTINS}
    table.update({name: getattr(builtins, name) for name in _EXCEPTIONS})
    table.update(_REFUSED_BUILTINS)
    writable_exact = frozenset({dict, list, bytearray, collections.defaultdict, collections.Counter})
    writable_any = (dict, list, bytearray, collections.deque, collections.UserDict, collections.UserList)

    def guarded_write(ob: Any) -> Any:
        if id(ob) in state.protected_ids:
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
        names = dir(args[0]) if args else list(state.namespace)
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
