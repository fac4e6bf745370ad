"""kopf's ClusterKopfPeering, checked as the API server would with its CRD in crds/."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import yaml

PEERING_GROUP = "kopf.dev"
CRD_PATH = Path(__file__).resolve().parents[2] / "crds" / "clusterkopfpeerings.kopf.dev.yaml"


@functools.cache
def peering_crds() -> dict[str, dict[str, Any]]:
    """The peering CRDs by kind."""
    with CRD_PATH.open(encoding="utf-8") as stream:
        return {doc["spec"]["names"]["kind"]: doc for doc in yaml.safe_load_all(stream) if doc}


def peering_problems(obj: Mapping[str, Any]) -> list[str]:
    """What the API server would refuse in a ClusterKopfPeering."""
    crd = peering_crds().get(str(obj.get("kind")))
    if crd is None:
        return [f"no peering CRD for kind {obj.get('kind')!r}"]
    version = crd["spec"]["versions"][0]
    if obj.get("apiVersion") != f"{crd['spec']['group']}/{version['name']}":
        return [f"apiVersion {obj.get('apiVersion')!r} is not served"]
    if not obj.get("metadata", {}).get("name"):
        return ["metadata.name: Required value"]
    schema = version["schema"]["openAPIV3Schema"]
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'.'.join(str(part) for part in error.path)}: {error.message}"
        for error in validator.iter_errors(dict(obj))
    ]
