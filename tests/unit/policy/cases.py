"""One table of policy cases, run through the operator's check (tests/unit/policy) and
through the ValidatingAdmissionPolicy on the real API server (tests/cluster/test_policy.py):
the two must agree on every one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

USER = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"
OTHER_USER = "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b"
#: Stands for the sandbox's namespace in a case's policy (each tier has its own namespace).
HERE = "<namespace>"
DIGEST = "sha256:" + "a" * 64


@dataclass(frozen=True)
class PolicyCase:
    """A CraftSandbox spec, a policy and a namespace label; allowed or refused, and why."""

    id: str
    spec: dict[str, Any]
    allowed: bool
    policy: dict[str, Any] = field(default_factory=dict)
    #: The namespace's craft.onyx.app/tenant-id label (None: not bound to a tenant).
    tenant: str | None = None
    #: Part of the refusal message (the same from the operator and the API server).
    message: str = ""

    def full_spec(self) -> dict[str, Any]:
        """The spec with the user filled in (``spec['user']`` overrides parts of it)."""
        return {**self.spec, "user": {"id": USER, **self.spec.get("user", {})}}

    def policy_in(self, namespace: str) -> dict[str, Any]:
        """The policy spec with :data:`HERE` replaced by ``namespace``."""
        rules = [
            {**rule, "namespaces": [namespace if n == HERE else n for n in rule["namespaces"]]}
            for rule in self.policy.get("libraryPrefixes", [])
        ]
        return {**self.policy, **({"libraryPrefixes": rules} if rules else {})}


def _refused(id: str, spec: dict[str, Any], message: str, **extra: Any) -> PolicyCase:
    return PolicyCase(id, spec, False, message=message, **extra)


def _allowed(id: str, spec: dict[str, Any], **extra: Any) -> PolicyCase:
    return PolicyCase(id, spec, True, **extra)


REPO = "registry.example.com/craft-sandbox"
OWN_PREFIX = f"acme/knowledge/{USER}/user_library/"
LAYOUT = {"libraryPrefixes": [{"namespaces": [HERE], "prefixes": ["legacy/{tenantId}/{userId}/"]}]}

CASES: tuple[PolicyCase, ...] = (
    # Nothing named: the operator's defaults, always allowed.
    _allowed("defaults", {}),
    # Images: a path prefix, a repository, an exact digest.
    _allowed(
        "image-under-allowed-path",
        {"image": "registry.example.com/craft/sandbox:1.2"},
        policy={"images": ["registry.example.com/craft/"]},
    ),
    _allowed("image-of-allowed-repository", {"image": f"{REPO}:1.2"}, policy={"images": [REPO]}),
    _allowed(
        "image-of-allowed-repository-by-digest",
        {"image": f"{REPO}@{DIGEST}"},
        policy={"images": [REPO]},
    ),
    _allowed(
        "image-pinned-by-digest",
        {"image": f"{REPO}@{DIGEST}"},
        policy={"images": [f"{REPO}@{DIGEST}"]},
    ),
    _refused(
        "image-without-policy", {"image": "attacker/sandbox:1"}, "spec.image attacker/sandbox:1"
    ),
    _refused(
        "image-of-a-sibling-repository",
        {"image": f"{REPO}-evil:1"},
        "(spec.images)",
        policy={"images": [REPO]},
    ),
    _refused(
        "image-beside-the-allowed-path",
        {"image": "registry.example.com/craft-evil/x:1"},
        "(spec.images)",
        policy={"images": ["registry.example.com/craft/"]},
    ),
    _refused(
        "image-with-another-digest",
        {"image": f"{REPO}@sha256:{'b' * 64}"},
        "(spec.images)",
        policy={"images": [f"{REPO}@{DIGEST}"]},
    ),
    _refused(
        "image-of-a-registry-host-named-as-an-allowed-repository",
        {"image": "busybox:5000/attacker/x:1"},
        "(spec.images)",
        policy={"images": ["busybox"]},
    ),
    _allowed(
        "image-of-an-allowed-repository-by-tag-and-digest",
        {"image": f"busybox:1.36@{DIGEST}"},
        policy={"images": ["busybox"]},
    ),
    _allowed(
        "image-of-an-allowed-tag",
        {"image": f"{REPO}:1.3.0"},
        policy={"images": [f"{REPO}:1.3.0"]},
    ),
    # The runtime pulls by the digest, whatever the tag says: any image of the repository.
    _refused(
        "image-of-an-allowed-tag-with-a-digest-appended",
        {"image": f"{REPO}:1.3.0@{DIGEST}"},
        "(spec.images)",
        policy={"images": [f"{REPO}:1.3.0"]},
    ),
    _refused(
        "image-of-another-tag-than-the-allowed-one",
        {"image": f"{REPO}:1.3.1"},
        "(spec.images)",
        policy={"images": [f"{REPO}:1.3.0"]},
    ),
    _allowed(
        "image-of-an-allowed-repository-behind-a-registry-port",
        {"image": "registry.example.com:5000/craft-sandbox:1"},
        policy={"images": ["registry.example.com:5000/craft-sandbox"]},
    ),
    # Untagged, Kubernetes pulls the repository's :latest, a tag the entry allows.
    _allowed("image-of-the-repository-without-tag", {"image": REPO}, policy={"images": [REPO]}),
    _allowed(
        "image-untagged-of-a-short-name", {"image": "busybox"}, policy={"images": ["busybox"]}
    ),
    _refused(
        "image-untagged-of-a-repository-whose-one-tag-is-allowed",
        {"image": REPO},
        "(spec.images)",
        policy={"images": [f"{REPO}:1.3.0"]},
    ),
    _refused(
        "image-untagged-of-a-sibling-repository",
        {"image": f"{REPO}-evil"},
        "(spec.images)",
        policy={"images": [REPO]},
    ),
    # Server URLs: whole URLs, a trailing '/' aside, never by prefix.
    _allowed(
        "server-url-listed",
        {"serverURL": "https://onyx.example.com/"},
        policy={"serverURLs": ["https://onyx.example.com"]},
    ),
    _refused(
        "server-url-extending-an-allowed-host",
        {"serverURL": "https://onyx.example.com.evil.io"},
        "spec.serverURL https://onyx.example.com.evil.io is not allowed",
        policy={"serverURLs": ["https://onyx.example.com"]},
    ),
    _refused("server-url-without-policy", {"serverURL": "https://evil.io"}, "(spec.serverURLs)"),
    # Scheduling: runtime and priority classes, tolerations, node selectors.
    _allowed(
        "runtime-class-listed",
        {"runtimeClassName": "gvisor"},
        policy={"runtimeClassNames": ["gvisor"]},
    ),
    _refused(
        "runtime-class-not-listed",
        {"runtimeClassName": "runc"},
        "spec.runtimeClassName runc",
        policy={"runtimeClassNames": ["gvisor"]},
    ),
    _allowed(
        "priority-class-listed",
        {"priorityClassName": "sandbox-low"},
        policy={"priorityClassNames": ["sandbox-low"]},
    ),
    _refused(
        "priority-class-not-listed",
        {"priorityClassName": "system-node-critical"},
        "(spec.priorityClassNames)",
    ),
    _allowed(
        "toleration-with-any-effect-allowed",
        {"tolerations": [{"key": "sandboxes", "operator": "Exists", "effect": "NoSchedule"}]},
        policy={"tolerations": [{"key": "sandboxes", "operator": "Exists"}]},
    ),
    _refused(
        "toleration-of-every-taint",
        {"tolerations": [{"operator": "Exists"}]},
        "(spec.tolerations)",
        policy={"tolerations": [{"key": "sandboxes", "operator": "Exists"}]},
    ),
    _refused(
        "toleration-of-every-effect-where-one-is-allowed",
        {"tolerations": [{"key": "sandboxes", "operator": "Exists"}]},
        "(spec.tolerations)",
        policy={
            "tolerations": [{"key": "sandboxes", "operator": "Exists", "effect": "NoSchedule"}]
        },
    ),
    _refused(
        "toleration-of-another-value-of-an-allowed-key",
        {"tolerations": [{"key": "dedicated", "value": "gpu-team", "effect": "NoSchedule"}]},
        "(spec.tolerations)",
        policy={"tolerations": [{"key": "dedicated", "value": "sandboxes"}]},
    ),
    # Exists tolerates every value of the key: wider than the value the entry allows.
    _refused(
        "toleration-of-every-value-where-one-is-allowed",
        {"tolerations": [{"key": "dedicated", "operator": "Exists"}]},
        "(spec.tolerations)",
        policy={"tolerations": [{"key": "dedicated"}]},
    ),
    _allowed(
        "node-selector-allowed",
        {"nodeSelector": {"workload": "sandboxes"}},
        policy={"nodeSelectors": {"workload": ["sandboxes"]}},
    ),
    _refused(
        "node-selector-value-not-allowed",
        {"nodeSelector": {"workload": "control-plane"}},
        "spec.nodeSelector workload=control-plane",
        policy={"nodeSelectors": {"workload": ["sandboxes"]}},
    ),
    # The library: buckets, and prefixes derived from tenant and user.
    _allowed(
        "bucket-listed",
        {"userLibrary": {"bucket": "user-files-eu"}},
        policy={"buckets": ["user-files-eu"]},
    ),
    _refused(
        "bucket-not-listed",
        {"userLibrary": {"bucket": "another-teams-bucket"}},
        "spec.userLibrary.bucket another-teams-bucket",
    ),
    _allowed("own-prefix", {"user": {"tenantId": "acme"}, "userLibrary": {"prefix": OWN_PREFIX}}),
    # A prefix without its '/' (or an empty one) is refused by the CRD itself, before any
    # policy: tests/unit/api/test_input_rules.py.
    _allowed(
        "own-prefix-with-an-upper-case-user-id",
        {"user": {"id": USER.upper(), "tenantId": "acme"}, "userLibrary": {"prefix": OWN_PREFIX}},
    ),
    _refused(
        "another-users-prefix",
        {
            "user": {"tenantId": "acme"},
            "userLibrary": {"prefix": OWN_PREFIX.replace(USER, OTHER_USER)},
        },
        "is not this user's library",
        policy=LAYOUT,
    ),
    _refused(
        "every-users-prefix",
        {"user": {"tenantId": "acme"}, "userLibrary": {"prefix": "acme/knowledge/"}},
        "is not this user's library",
    ),
    _allowed(
        "layout-allowed-in-this-namespace",
        {"user": {"tenantId": "acme"}, "userLibrary": {"prefix": f"legacy/acme/{USER}/"}},
        policy=LAYOUT,
    ),
    _refused(
        "layout-allowed-elsewhere",
        {"user": {"tenantId": "acme"}, "userLibrary": {"prefix": f"legacy/acme/{USER}/"}},
        "is not this user's library",
        policy={
            "libraryPrefixes": [
                {"namespaces": ["somewhere-else"], "prefixes": ["legacy/{tenantId}/{userId}/"]}
            ]
        },
    ),
    _refused(
        "layout-filled-with-another-user",
        {"user": {"tenantId": "acme"}, "userLibrary": {"prefix": f"legacy/acme/{OTHER_USER}/"}},
        "is not this user's library",
        policy=LAYOUT,
    ),
    # Tenancy: a namespace bound to a tenant serves only that tenant.
    _allowed("tenant-of-the-namespace", {"user": {"tenantId": "acme"}}, tenant="acme"),
    _refused(
        "tenant-other-than-the-namespaces",
        {"user": {"tenantId": "globex"}},
        "belongs to tenant acme (label craft.onyx.app/tenant-id): spec.user.tenantId globex",
        tenant="acme",
    ),
    _refused("default-tenant-in-a-bound-namespace", {}, "spec.user.tenantId public", tenant="acme"),
)
