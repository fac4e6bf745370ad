"""Invalid CraftSandbox manifests, each with the message a platform engineer should see.

Each case changes one thing in a minimal valid manifest. ``expect`` is a fragment of the
API server's error, as a real kube-apiserver words it (``tests/cluster/test_admission.py``
sends every case to one); ``status`` is its HTTP status: 422 for an invalid object, 400 for
a request it cannot even decode (an unknown field under strict field validation, an
``apiVersion`` it does not serve). ``model`` says whether the operator's pydantic model
rejects the same object (it does for every spec constraint; it is deliberately lenient
about what only the API server enforces: object names, unknown fields, and lax scalar
coercion). ``also`` lists the other errors the API server reports for the same object (its
schema checks and CEL rules run independently, so e.g. an empty string can fail both
``minLength`` and a CEL pattern).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.unit.api.samples import USER_ID, sandbox

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Case:
    """One invalid manifest and the error fragment it must produce."""

    id: str
    change: Callable[[Manifest], None]
    expect: str
    model: bool = True
    also: tuple[str, ...] = ()
    status: int = 422

    def manifest(self) -> Manifest:
        """The minimal valid manifest with this case's change applied."""
        manifest = sandbox()
        self.change(manifest)
        return manifest


def spec(**fields: Any) -> Callable[[Manifest], None]:
    """Set top-level spec fields."""
    return lambda manifest: manifest["spec"].update(fields)


def user(**fields: Any) -> Callable[[Manifest], None]:
    """Set spec.user fields."""
    return lambda manifest: manifest["spec"]["user"].update(fields)


def library(**fields: Any) -> Callable[[Manifest], None]:
    """Set spec.userLibrary fields."""
    return lambda manifest: manifest["spec"].setdefault("userLibrary", {}).update(fields)


def name(value: str) -> Callable[[Manifest], None]:
    """Rename the object."""
    return lambda manifest: manifest["metadata"].update(name=value)


def drop(*path: str) -> Callable[[Manifest], None]:
    """Remove the field at ``path``."""

    def change(manifest: Manifest) -> None:
        node = manifest
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]

    return change


SOURCE = {"name": "slack"}

# Updates (tests/unit/api/test_updates.py). spec.user is an object, so its value is not shown.
USER_ID_IMMUTABLE = (
    "spec.user: Invalid value: user.id is immutable; delete this CraftSandbox and create a new one"
)
TENANT_IMMUTABLE = (
    "spec.user: Invalid value: user.tenantId is immutable; "
    "delete this CraftSandbox and create a new one"
)
#: An update is a PUT to the stored object's URL (alice's, from sandbox()), named bob here.
RENAMED = "the name of the object (bob) does not match the name on the URL (alice)"

INVALID: list[Case] = [
    # the object and its name
    Case("missing-spec", drop("spec"), "spec: Required value"),
    Case(
        "spec-not-an-object",
        lambda m: m.update(spec="alice"),
        'spec: Invalid value: "string": spec in body must be of type object',
    ),
    Case(
        # v1 has no schema, so under strict field validation everything in it is unknown
        # (kubectl refuses it earlier still: no matches for kind "CraftSandbox" in version
        # "craft.onyx.app/v1").
        "wrong-api-version",
        lambda m: m.update(apiVersion="craft.onyx.app/v1"),
        'CraftSandbox in version "v1" cannot be handled as a CraftSandbox: '
        'strict decoding error: unknown field "spec"',
        status=400,
    ),
    Case(
        "name-too-long", name("a" * 46), "a CraftSandbox name is at most 45 characters", model=False
    ),
    Case(
        "name-not-a-dns-label",
        name("Alice_Sandbox"),
        "a CraftSandbox name must be a DNS label",
        model=False,
        also=('metadata.name: Invalid value: "Alice_Sandbox": a lowercase RFC 1123 subdomain',),
    ),
    Case(
        "misspelt-field",
        spec(userLibary={"mode": "Job"}),
        'CraftSandbox in version "v1alpha1" cannot be handled as a CraftSandbox: '
        'strict decoding error: unknown field "spec.userLibary"',
        model=False,
        status=400,
    ),
    # user
    Case("missing-user", drop("spec", "user"), "spec.user: Required value"),
    Case("missing-user-id", drop("spec", "user", "id"), "spec.user.id: Required value"),
    Case(
        "user-id-not-a-uuid",
        user(id="alice"),
        'spec.user.id: Invalid value: "alice": user.id must be an Onyx user UUID',
    ),
    Case(
        "user-id-without-dashes",
        user(id=USER_ID.replace("-", "")),
        "user.id must be an Onyx user UUID",
    ),
    Case("user-id-a-number", user(id=42), "spec.user.id in body must be of type string"),
    Case(
        "tenant-id-empty",
        user(tenantId=""),
        "spec.user.tenantId in body should be at least 1 chars long",
        also=("user.tenantId may contain only letters",),
    ),
    Case(
        "tenant-id-with-slash",
        user(tenantId="acme/corp"),
        "user.tenantId may contain only letters, digits",
    ),
    Case(
        "tenant-id-not-a-label-value",
        user(tenantId="acme-"),
        "starts and ends with a letter or digit",
    ),
    Case(
        "email-too-long",
        user(email="a" * 250 + "@x.io"),
        "spec.user.email: Too long: may not be more than 254 bytes",
    ),
    # image and server
    Case(
        "image-with-spaces",
        spec(image="craft sandbox:1.4.4"),
        "image must be an image reference without spaces",
    ),
    Case(
        "image-empty",
        spec(image=""),
        "spec.image in body should be at least 1 chars long",
        also=("image must be an image reference without spaces",),
    ),
    Case(
        "server-url-without-scheme",
        spec(serverURL="onyx.example.com"),
        "serverURL must be an http:// or https:// URL",
    ),
    Case(
        "server-url-ftp",
        spec(serverURL="ftp://onyx.example.com"),
        "serverURL must be an http:// or https:// URL",
    ),
    Case(
        "suspend-not-a-boolean",
        spec(suspend="yes"),
        "spec.suspend in body must be of type boolean",
        model=False,
    ),
    # durations
    Case(
        "idle-timeout-in-words",
        spec(idleTimeout="30 minutes"),
        "idleTimeout must be a duration: a number and a unit",
    ),
    Case("idle-timeout-in-days", spec(idleTimeout="1d"), "idleTimeout must be a duration"),
    Case("idle-timeout-too-short", spec(idleTimeout="30s"), "idleTimeout must be at least 1m"),
    Case(
        "idle-timeout-a-number",
        spec(idleTimeout=3600),
        "spec.idleTimeout in body must be of type string",
        model=False,
    ),
    Case(
        "lifetime-too-short",
        spec(credentials={"lifetime": "30m"}),
        "credentials.lifetime must be between 1h and 8760h",
    ),
    Case(
        "lifetime-too-long",
        spec(credentials={"lifetime": "9000h"}),
        "credentials.lifetime must be between 1h and 8760h",
    ),
    Case(
        "lifetime-negative",
        spec(credentials={"lifetime": "-1h"}),
        "credentials.lifetime must be a duration",
    ),
    # scheduling
    Case(
        "cpu-in-words",
        spec(resources={"requests": {"cpu": "two"}}),
        'spec.resources.requests[cpu]: Invalid value: "two": must be a Kubernetes quantity',
    ),
    Case(
        "memory-with-space",
        spec(resources={"limits": {"memory": "10 GB"}}),
        'spec.resources.limits[memory]: Invalid value: "10 GB": must be a Kubernetes quantity',
    ),
    Case(
        "request-above-limit",
        spec(resources={"requests": {"memory": "20Gi"}, "limits": {"memory": "8Gi"}}),
        "a request is above the limit of the same resource",
        model=False,
    ),
    Case(
        "gpu-request-below-limit",
        spec(resources={"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}),
        "hugepages and extended resources (e.g. nvidia.com/gpu) are never overcommitted",
        model=False,
    ),
    Case(
        "gpu-fraction",
        spec(resources={"limits": {"nvidia.com/gpu": "0.5"}}),
        "spec.resources.limits: Invalid value: an extended resource (e.g. nvidia.com/gpu) is "
        "counted in whole devices",
        model=False,
    ),
    Case(
        "gpu-fraction-requested",
        spec(resources={"requests": {"nvidia.com/gpu": "1500m"}}),
        "spec.resources.requests: Invalid value: an extended resource (e.g. nvidia.com/gpu) is "
        "counted in whole devices",
        model=False,
    ),
    Case(
        "hugepages-part-of-a-page",
        spec(resources={"limits": {"hugepages-2Mi": "3Mi", "memory": "1Gi"}}),
        "spec.resources.limits: Invalid value: hugepages-<size> is counted in whole pages",
        model=False,
    ),
    Case(
        "hugepages-size-not-whole",
        spec(resources={"limits": {"hugepages-1.5": 3, "memory": "1Gi"}}),
        "spec.resources.limits: Invalid value: hugepages-<size> is counted in whole pages",
        model=False,
    ),
    Case(
        "quantity-a-list",
        spec(resources={"limits": {"cpu": [1]}}),
        "spec.resources.limits.cpu in body must be of type integer,string",
    ),
    Case(
        "negative-toleration-seconds",
        spec(tolerations=[{"key": "k", "effect": "NoExecute", "tolerationSeconds": -1}]),
        "tolerations[0].tolerationSeconds in body should be greater than or equal to 0",
    ),
    Case(
        "toleration-operator-unknown",
        spec(tolerations=[{"key": "k", "operator": "In"}]),
        'spec.tolerations[0].operator: Unsupported value: "In": supported values: "Exists"',
    ),
    Case(
        "tolerations-not-a-list",
        spec(tolerations="dedicated=craft:NoSchedule"),
        "spec.tolerations in body must be of type array",
    ),
    Case(
        "node-selector-value-too-long",
        spec(nodeSelector={"pool": "x" * 64}),
        "spec.nodeSelector.pool: Too long: may not be more than 63 bytes",
    ),
    # sources
    Case(
        "source-name-with-spaces",
        spec(sources=[{"name": "Google Drive"}]),
        'spec.sources[0].name: Invalid value: "Google Drive": a source name is an Onyx source '
        "identifier",
    ),
    Case(
        "source-name-starting-with-digit",
        spec(sources=[SOURCE, {"name": "1drive"}]),
        'spec.sources[1].name: Invalid value: "1drive": a source name is an Onyx source identifier',
    ),
    Case(
        "source-without-name",
        spec(sources=[{"description": "wiki"}]),
        "spec.sources[0].name: Required value",
    ),
    Case(
        "too-many-sources",
        spec(sources=[SOURCE] * 101),
        "spec.sources: Too many: 101: must have at most 100 items",
    ),
    Case(
        "thousands-of-sources",
        spec(sources=[SOURCE] * 5000),
        "spec.sources: Too many: 5000: must have at most 100 items",
    ),
    Case(
        "half-a-megabyte-of-description",
        spec(sources=[{"name": "slack", "description": "d" * 2**19}]),
        "spec.sources[0].description: Too long: may not be more than 500 bytes",
    ),
    Case(
        "too-many-scopes",
        spec(sources=[{"name": "slack", "scopes": ["#c"] * 51}]),
        "spec.sources[0].scopes: Too many: 51: must have at most 50 items",
    ),
    Case(
        "more-scopes-than-etcd-holds",
        spec(sources=[{"name": f"s{i}", "scopes": ["c" * 200] * 6} for i in range(100)]),
        "spec.sources: Invalid value: the sources' scopes may hold at most 100000 "
        "characters in all, so that the CraftSandbox fits in etcd",
    ),
    Case(
        "more-disabled-paths-than-etcd-holds",
        library(disabledPaths=[f"{i:04}" + "p" * 1020 for i in range(129)]),
        "spec.userLibrary.disabledPaths: Invalid value: userLibrary.disabledPaths "
        "may hold at most 131072 characters in all, so that the CraftSandbox fits in etcd: "
        "disable a directory rather than each file in it",
    ),
    Case(
        "source-description-too-long",
        spec(sources=[{"name": "slack", "description": "d" * 501}]),
        "spec.sources[0].description: Too long: may not be more than 500 bytes",
    ),
    # user library
    Case(
        "unknown-library-mode",
        library(mode="Rsync"),
        'spec.userLibrary.mode: Unsupported value: "Rsync": supported values: "Exec", "Job"',
    ),
    Case(
        "library-mode-lowercase",
        library(mode="job"),
        'spec.userLibrary.mode: Unsupported value: "job"',
    ),
    Case(
        "bucket-with-capitals",
        library(bucket="My_Bucket"),
        "userLibrary.bucket must be an S3 bucket name",
    ),
    Case(
        "bucket-too-short",
        library(bucket="ab"),
        "spec.userLibrary.bucket in body should be at least 3 chars long",
        also=("userLibrary.bucket must be an S3 bucket name",),
    ),
    Case(
        "prefix-with-leading-slash",
        library(prefix="/public/knowledge/"),
        "userLibrary.prefix is an S3 key prefix: no leading '/'",
    ),
    Case(
        "prefix-with-dot-dot",
        library(prefix="public/knowledge/../other/"),
        "userLibrary.prefix must not contain '..'",
    ),
    Case(
        "prefix-without-trailing-slash",
        library(prefix=f"public/knowledge/{USER_ID}/user_library"),
        "userLibrary.prefix is a folder: it ends with '/'",
    ),
    Case(
        "prefix-empty",
        library(prefix=""),
        "userLibrary.prefix is a folder: it ends with '/'",
    ),
    Case(
        "empty-exclude-pattern",
        library(exclude=[""]),
        "spec.userLibrary.exclude[0] in body should be at least 1 chars long",
    ),
    Case(
        "library-size-in-words",
        library(size="lots"),
        'spec.userLibrary.size: Invalid value: "lots": must be a Kubernetes quantity',
    ),
]


#: Changes of a stored CraftSandbox that are allowed (only who it belongs to is immutable).
ALLOWED_CHANGES: list[dict[str, Any]] = [
    {"suspend": True},
    {"image": "craft-sandbox:2.0.0"},
    {"serverURL": "https://onyx-2.example.com"},
    {"idleTimeout": "45m"},
    {"sources": [{"name": "slack", "scopes": ["#general"]}, {"name": "notion"}]},
    {"userLibrary": {"mode": "Job", "exclude": ["*.tmp"]}},
    {"credentials": {"lifetime": "24h"}},
    {"resources": {"limits": {"cpu": 4, "memory": "16Gi"}}},
    {"tolerations": [{"key": "dedicated", "operator": "Exists"}]},
]
