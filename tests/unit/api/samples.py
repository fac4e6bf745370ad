"""Paths and small manifest builders shared by the API tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
CRD_FILE = REPO / "crds" / "craftsandboxes.craft.onyx.app.yaml"
EXAMPLES_DIR = REPO / "manifests" / "examples"
INVALID_DIR = Path(__file__).resolve().parent / "invalid"

USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"
OTHER_USER_ID = "9a1d7c44-0b2e-4f3a-8c5d-6e7f8a9b0c1d"


def sandbox(spec: dict[str, Any] | None = None, *, name: str = "alice") -> dict[str, Any]:
    """A CraftSandbox manifest with ``spec`` (default: only the required user.id)."""
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": name, "namespace": "craft"},
        "spec": copy.deepcopy(spec) if spec is not None else {"user": {"id": USER_ID}},
    }


def load_yaml(path: Path) -> Any:
    """The single YAML document in ``path``."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))
