"""A machine too slow for its limits: on PYTHONPATH, this makes the import of the module named
by RLM_TEST_SLOW_MODULE take RLM_TEST_SLOW_S seconds longer (tests/test_faults.py). The wait is
in the module's own execution, where a real slow import spends its time: other imports go on
meanwhile, as they do beside a real one."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time
from collections.abc import Sequence
from types import ModuleType


class _SlowLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        time.sleep(float(os.environ.get("RLM_TEST_SLOW_S", "30")))
        self.inner.exec_module(module)


class _SlowFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != os.environ.get("RLM_TEST_SLOW_MODULE"):
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _SlowLoader(spec.loader)
                return spec
        return None


sys.meta_path.insert(0, _SlowFinder())
