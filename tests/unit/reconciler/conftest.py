"""Fixtures for the reconciler's building blocks: the kube/ tests' emulator and client."""

from __future__ import annotations

# The same emulator (with its uid preconditions) and client as tests/unit/kube; NAMESPACE
# stays importable from here for the reconciler's tests.
from tests.unit.kube.conftest import NAMESPACE, emulator, kube  # noqa: F401

__all__ = ["NAMESPACE"]
