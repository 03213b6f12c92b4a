"""Post-import hooks: run a callback right after a named module has finished executing.

The hook wraps ``exec_module`` of the loader the normal import system found, so a module that is
executed again (importlib.reload, or a package that re-imports a mirror of itself) is patched
again each time. Nothing is imported here; a process that never imports a watched module pays one
dictionary lookup per import.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

Callback = Callable[[ModuleType], None]

_CALLBACKS: dict[str, list[Callback]] = {}
_FINDER: _PostImportFinder | None = None


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; decorates the spec found by the rest of ``sys.meta_path``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _CALLBACKS:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        _wrap_loader(spec.loader, fullname)
        return spec


def _wrap_loader(loader: Any, fullname: str) -> None:
    original = loader.exec_module
    if getattr(original, "_sm_emulator_wrapped", False):
        return

    def exec_module(module: ModuleType) -> None:
        original(module)
        run_callbacks(fullname, module)

    exec_module._sm_emulator_wrapped = True  # type: ignore[attr-defined]
    loader.exec_module = exec_module


def run_callbacks(fullname: str, module: ModuleType) -> None:
    """Run every callback registered for ``fullname`` on ``module``."""
    for callback in _CALLBACKS.get(fullname, ()):
        callback(module)


def when_imported(fullname: str, callback: Callback) -> None:
    """Call ``callback(module)`` after ``fullname`` executes (now, if it is already imported)."""
    global _FINDER
    _CALLBACKS.setdefault(fullname, []).append(callback)
    if _FINDER is None:
        _FINDER = _PostImportFinder()
        sys.meta_path.insert(0, _FINDER)
    module = sys.modules.get(fullname)
    if module is not None and getattr(module, "__spec__", None) is not None:
        callback(module)
