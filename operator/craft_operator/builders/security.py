"""The security settings every pod the operator creates runs with (Pod Security "restricted")."""

from __future__ import annotations

from typing import Any

#: The sandbox image's user and group; volumes are made writable for it with fsGroup.
SANDBOX_UID = 1000


def pod_security_context(uid: int = SANDBOX_UID) -> dict[str, Any]:
    """Pod-level: non-root with a fixed uid/gid, volumes owned by its group, seccomp on."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context(
    uid: int = SANDBOX_UID, *, read_only_root: bool = False
) -> dict[str, Any]:
    """Container-level: no privilege escalation, every capability dropped."""
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if read_only_root:
        context["readOnlyRootFilesystem"] = True
    return context
