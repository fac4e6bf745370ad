"""Craft sandbox operator: reconciles CraftSandbox resources into per-user agent sandboxes."""

from __future__ import annotations

import sys as _sys
from collections.abc import Sequence as _Sequence
from importlib.abc import Loader as _Loader
from importlib.machinery import ModuleSpec as _ModuleSpec
from importlib.machinery import PathFinder as _PathFinder
from types import ModuleType as _ModuleType

__version__ = "0.1.0"


class _KopfWithoutKubernetes:
    """Import kopf without the ``kubernetes`` client, which it would import only to
    recognise that client's model objects (about 45 MiB of the operator's memory).

    The operator hands kopf plain dicts only, and imports ``kubernetes`` itself where it
    uses it (exec, a kubeconfig that needs the client). A one-shot import hook: it hides
    the package from kopf's ``thirdparty`` module while that module runs, unless it is
    loaded already.
    """

    target = "kopf._cogs.helpers.thirdparty"

    def find_spec(
        self, name: str, path: _Sequence[str] | None, target: _ModuleType | None = None, /
    ) -> _ModuleSpec | None:
        if name != self.target:
            return None
        _sys.meta_path.remove(self)
        spec = _PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None and "kubernetes" not in _sys.modules:
            spec.loader = _HidingLoader(spec.loader)
        return spec


class _HidingLoader(_Loader):
    def __init__(self, loader: _Loader) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> object:
        return getattr(self._loader, name)  # get_source etc., for tracebacks and tools

    def create_module(self, spec: _ModuleSpec) -> _ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: _ModuleType) -> None:
        _sys.modules["kubernetes"] = None  # type: ignore[assignment]  # ImportError inside
        try:
            self._loader.exec_module(module)
        finally:
            if _sys.modules.get("kubernetes", 0) is None:
                del _sys.modules["kubernetes"]


if "kopf" not in _sys.modules:
    _sys.meta_path.insert(0, _KopfWithoutKubernetes())
