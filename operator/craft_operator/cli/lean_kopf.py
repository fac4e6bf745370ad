"""Importing kopf without the ``kubernetes`` client, in the operator's own process.

kopf imports the ``kubernetes`` client, if installed, only to recognise that client's model
objects: about 45 MiB of the operator's memory for nothing, since the operator hands kopf
plain dicts and imports ``kubernetes`` itself where it uses it (exec, a kubeconfig that
needs the client). :func:`install` adds a one-shot import hook that hides the package from
kopf's ``thirdparty`` module while that module runs. The ``craft-operator`` command
installs it before anything imports kopf; a program that merely imports
``craft_operator`` (the backend's client, say) is left alone.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import Loader
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType


def install() -> None:
    """Hide ``kubernetes`` from kopf's first import (nothing if kopf is loaded already)."""
    if "kopf" not in sys.modules and not any(
        isinstance(finder, _KopfWithoutKubernetes) for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _KopfWithoutKubernetes())


class _KopfWithoutKubernetes:
    """The one-shot hook: hides ``kubernetes`` from kopf's ``thirdparty`` module while that
    module runs, unless it is loaded already."""

    target = "kopf._cogs.helpers.thirdparty"

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None, /
    ) -> ModuleSpec | None:
        if name != self.target:
            return None
        sys.meta_path.remove(self)
        spec = PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None and "kubernetes" not in sys.modules:
            spec.loader = _HidingLoader(spec.loader)
        return spec


class _HidingLoader(Loader):
    def __init__(self, loader: Loader) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> object:
        return getattr(self._loader, name)  # get_source etc., for tracebacks and tools

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        sys.modules["kubernetes"] = None  # type: ignore[assignment]  # ImportError inside
        try:
            self._loader.exec_module(module)
        finally:
            if sys.modules.get("kubernetes", 0) is None:
                del sys.modules["kubernetes"]
