"""The Pod Security Standards "restricted" profile, checked offline.

Follows the controls of https://kubernetes.io/docs/concepts/security/pod-security-standards/
(baseline plus restricted) for the fields a pod manifest can carry. Returns one line per
violation, so a test failure says which control a pod breaks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ALLOWED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
ALLOWED_ADDED_CAPABILITIES = {"NET_BIND_SERVICE"}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}


def restricted_violations(pod: Mapping[str, Any]) -> list[str]:
    """What in ``pod`` breaks the restricted profile (empty: it complies)."""
    spec = pod.get("spec", {})
    pod_sc = spec.get("securityContext") or {}
    problems: list[str] = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            problems.append(f"spec.{field} must not be true")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUME_TYPES:
            problems.append(f"volume {volume.get('name')} uses {sorted(kinds)}")
    for sysctl in pod_sc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            problems.append(f"sysctl {sysctl.get('name')} is not allowed")
    if pod_sc.get("runAsUser") == 0:
        problems.append("spec.securityContext.runAsUser must not be 0")
    containers = [
        *spec.get("initContainers", []),
        *spec.get("containers", []),
        *spec.get("ephemeralContainers", []),
    ]
    for container in containers:
        name = container.get("name")
        sc = container.get("securityContext") or {}
        where = f"container {name}"
        if sc.get("privileged"):
            problems.append(f"{where}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: securityContext.allowPrivilegeEscalation must be false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            problems.append(f"{where}: securityContext.capabilities.drop must include ALL")
        added = set(caps.get("add") or []) - ALLOWED_ADDED_CAPABILITIES
        if added:
            problems.append(f"{where}: adds capabilities {sorted(added)}")
        run_as_non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
        if run_as_non_root is not True:
            problems.append(f"{where}: runAsNonRoot must be true (pod or container)")
        if sc.get("runAsUser") == 0:
            problems.append(f"{where}: runAsUser must not be 0")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{where}: seccompProfile must be RuntimeDefault or Localhost")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                problems.append(f"{where}: hostPort {port['hostPort']}")
        if sc.get("procMount") not in (None, "Default"):
            problems.append(f"{where}: procMount must be Default")
    return problems
