"""What `import` gives a cell: the allowed modules as read-only stand-ins (part of the policy).

Each allowed module (rlm.sandbox.worker.modules) is imported and warmed up
when this loads, before lock-down, and handed to cells only as a
`ModuleView`: its public, non-module attributes minus known gadgets (or an
explicit list, for modules whose surface is mostly files, processes or
clocks). `re` takes the lazy `context` of a big file too; `time.strptime`
does not import as it runs. The import guard and the compile-time check
(rlm.sandbox.worker.policy) hand out these views and nothing else.

Imported only by the worker process: standard library and rlm.text.
"""

from __future__ import annotations

import _strptime  # type: ignore[import-not-found]  # behind time.strptime (see _time_strptime)
import datetime
import decimal
import hashlib
import importlib
import random
import re
import time
import types
from collections.abc import Mapping
from typing import Any

from rlm.sandbox.worker.modules import ALLOWED_MODULES
from rlm.text import textfile

__all__ = ["ALLOWED_TEXT", "VIEWS", "ModuleView"]

_ModuleType = types.ModuleType


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


VIEWS: dict[str, ModuleView] = _build_views()
ALLOWED_TEXT = ", ".join(ALLOWED_MODULES)


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
