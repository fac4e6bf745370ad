"""Fixtures for the CraftSandbox API tests: the committed CRD and its schema."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api.samples import CRD_FILE, load_yaml


@pytest.fixture(scope="session")
def crd() -> dict[str, Any]:
    """The committed CRD (crds/craftsandboxes.craft.onyx.app.yaml)."""
    document: dict[str, Any] = load_yaml(CRD_FILE)
    return document


@pytest.fixture(scope="session")
def version(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD's only version, v1alpha1."""
    versions: list[dict[str, Any]] = crd["spec"]["versions"]
    assert [item["name"] for item in versions] == ["v1alpha1"]
    return versions[0]


@pytest.fixture(scope="session")
def schema(version: dict[str, Any]) -> dict[str, Any]:
    """The version's openAPIV3Schema."""
    root: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return root
