"""Fixtures of the builder tests: CraftSandboxes parsed as the reconciler parses them."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from craft_operator.api.models import CraftSandbox
from craft_operator.api.parse import parse_sandbox
from craft_operator.config import Settings

EXAMPLES = sorted((Path(__file__).parents[3] / "manifests" / "examples").glob("*.yaml"))
UID = "0b5e3c7a-4d1f-4a8e-9c2b-7e6f5d4c3b2a"
NAMESPACE = "craft-sandboxes"
USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"


def admitted(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` as the API server hands it to the operator: with a namespace and a uid."""
    result = copy.deepcopy(dict(body))
    result["metadata"] = {**result["metadata"], "namespace": NAMESPACE, "uid": UID}
    result["metadata"].setdefault("generation", 1)
    return result


def example_bodies() -> list[Any]:
    """Every example manifest as a pytest param named after its file."""
    return [
        pytest.param(admitted(yaml.safe_load(path.read_text())), id=path.stem) for path in EXAMPLES
    ]


@pytest.fixture
def make_sandbox() -> Callable[..., CraftSandbox]:
    """Build a parsed CraftSandbox named ``alice`` from spec fields (camelCase, as in YAML)."""

    def make(name: str = "alice", **spec: Any) -> CraftSandbox:
        body = {
            "apiVersion": "craft.onyx.app/v1alpha1",
            "kind": "CraftSandbox",
            "metadata": {"name": name},
            "spec": {"user": {"id": USER_ID}, **spec},
        }
        return parse_sandbox(admitted(body))

    return make


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Operator settings with a default server URL and the default resources."""
    return Settings(state_dir=tmp_path / "state", server_url="http://onyx.invalid:8080")
