"""What ``manifests/sandbox-namespace`` puts in a sandbox namespace, for the emulated tiers.

The cluster tier applies the kustomization itself (``Cluster.sandbox_namespace``); the
emulator gets its NetworkPolicies as namespace defaults, the way a platform that provisions
namespaces would put them in each new one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.support.emulator import KubeEmulator

SANDBOX_NAMESPACE = Path(__file__).resolve().parents[2] / "manifests" / "sandbox-namespace"
NETWORK_POLICIES = "networking.k8s.io/v1/networkpolicies"


def sandbox_namespace_objects() -> list[dict[str, Any]]:
    """Every object of the kustomization (without a namespace), in its resource order."""
    kustomization = yaml.safe_load((SANDBOX_NAMESPACE / "kustomization.yaml").read_text())
    return [
        document
        for resource in kustomization["resources"]
        for document in yaml.safe_load_all((SANDBOX_NAMESPACE / resource).read_text())
        if document
    ]


def network_policies() -> list[dict[str, Any]]:
    """The NetworkPolicies every sandbox namespace gets."""
    return [obj for obj in sandbox_namespace_objects() if obj["kind"] == "NetworkPolicy"]


def provision_sandbox_namespaces(emulator: KubeEmulator) -> None:
    """Give every namespace that appears from now on the sandbox NetworkPolicies."""
    emulator.namespace_defaults.extend((NETWORK_POLICIES, policy) for policy in network_policies())
