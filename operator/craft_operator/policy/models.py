"""The CraftSandboxPolicy API (``craft.onyx.app/v1alpha1``): what a CraftSandbox may name.

One cluster-scoped object, named ``default``, written by the platform team. The operator
reads it (every reconcile checks the sandbox against it, see :mod:`craft_operator.policy.rules`)
and so does the ValidatingAdmissionPolicy in ``manifests/policy`` (as its parameters): one
source of truth. The CRD in ``crds/`` is generated from these models
(``craft-operator crd --policy``), like the CraftSandbox CRD.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationInfo

from craft_operator.api.base import check_url
from craft_operator.api.models import (
    DNS_LABEL_PATTERN,
    GROUP,
    S3_BUCKET_PATTERN,
    URL_PATTERN,
    ApiModel,
    ObjectMeta,
    TaintEffect,
    TolerationOperator,
    cel,
    cel_rules,
    cel_string,
)

POLICY_KIND = "CraftSandboxPolicy"
POLICY_PLURAL = "craftsandboxpolicies"
POLICY_SINGULAR = "craftsandboxpolicy"
#: The only CraftSandboxPolicy the operator and the admission policy read.
POLICY_NAME = "default"
#: The condition a sandbox carries (``False``) only while it runs, admitted before, without
#: a readable CraftSandboxPolicy.
POLICY_ENFORCED = "PolicyEnforced"
#: A namespace with this label serves only CraftSandboxes of that Onyx tenant.
TENANT_LABEL = f"{GROUP}/tenant-id"
#: Placeholders of a library prefix layout.
TENANT_PLACEHOLDER = "{tenantId}"
USER_PLACEHOLDER = "{userId}"
#: Onyx's own layout of a user's library in S3 (``library.location.default_prefix``).
DEFAULT_LAYOUT = f"{TENANT_PLACEHOLDER}/knowledge/{USER_PLACEHOLDER}/user_library/"

_MAX_ITEMS = 256


class AllowedToleration(ApiModel):
    """A toleration a sandbox may carry. Unset key and value mean empty (as in a pod);
    an unset effect allows the toleration with any one effect, or with none."""

    key: str | None = Field(default=None, description="The taint key.", max_length=317)
    operator: TolerationOperator | None = Field(
        default=None, description="Exists or Equal (default Equal)."
    )
    value: str | None = Field(default=None, description="The taint value.", max_length=63)
    effect: TaintEffect | None = Field(
        default=None, description="The taint effect; unset allows any effect."
    )


LayoutTemplate = Annotated[
    str,
    Field(
        min_length=len(USER_PLACEHOLDER) + 1,
        max_length=512,
        json_schema_extra=cel_rules(
            cel(
                f"self.contains({cel_string(USER_PLACEHOLDER)})",
                "a library prefix layout must contain {userId}, so that every user gets "
                "a prefix of their own",
            ),
            cel("self.endsWith('/')", "a library prefix layout ends with '/'"),
            cel(
                "!self.startsWith('/') && !self.contains('..')",
                "a library prefix layout is an S3 key prefix: no leading '/', no '..'",
            ),
        ),
    ),
]


class LibraryPrefixRule(ApiModel):
    """Library prefix layouts, other than Onyx's, that sandboxes in some namespaces may use."""

    namespaces: list[Annotated[str, Field(max_length=63, pattern=DNS_LABEL_PATTERN)]] = Field(
        description="The namespaces whose sandboxes may use these layouts.",
        min_length=1,
        max_length=_MAX_ITEMS,
    )
    prefixes: list[LayoutTemplate] = Field(
        description=(
            "Prefix layouts with the placeholders {tenantId} and {userId} (required), "
            "e.g. 'legacy/{tenantId}/{userId}/'. A sandbox's userLibrary.prefix must equal "
            "one of them with its own tenant and user filled in."
        ),
        min_length=1,
        max_length=16,
    )


def _server_url(value: str, info: ValidationInfo) -> str | None:
    return check_url(value, info, "each of serverURLs must be an http:// or https:// URL")


#: An allowed server URL. The schema's ``pattern`` is checked by :func:`_server_url` (as
#: pydantic's would, but more leniently for a policy read back: see ``check_url``).
ServerUrl = Annotated[
    str,
    Field(max_length=2048, json_schema_extra={"pattern": URL_PATTERN}),
    AfterValidator(_server_url),
]


class CraftSandboxPolicySpec(ApiModel):
    """What CraftSandboxes may name beyond the operator's defaults.

    A field a sandbox leaves unset is always allowed (the operator's default applies); a
    field below that it sets must be allowed here. Empty lists allow nothing but the
    defaults. Quantities (resources, volume sizes, storage classes) are bounded by the
    namespace's ResourceQuota and LimitRange, not here.
    """

    images: list[Annotated[str, Field(min_length=1, max_length=512)]] = Field(
        default_factory=list,
        description=(
            "Allowed spec.image values: 'registry.example.com/craft/' (ends in '/': any "
            "image under that path), 'registry.example.com/craft-sandbox' (that repository: "
            "untagged, which is its :latest, or any tag or digest), "
            "'registry.example.com/craft-sandbox:1.3.0' or "
            "'registry.example.com/craft-sandbox@sha256:…' (exactly that reference: a tag "
            "with a digest appended is not it). The operator's CRAFT_SANDBOX_IMAGE is always "
            "allowed."
        ),
        max_length=_MAX_ITEMS,
    )
    server_urls: list[ServerUrl] = Field(
        default_factory=list,
        alias="serverURLs",
        description=(
            "Allowed spec.serverURL values, compared whole (a trailing '/' aside). The "
            "operator's CRAFT_SERVER_URL is always allowed."
        ),
        max_length=_MAX_ITEMS,
    )
    runtime_class_names: list[Annotated[str, Field(max_length=253)]] = Field(
        default_factory=list,
        description="Allowed spec.runtimeClassName values (unset: the cluster's default runtime).",
        max_length=_MAX_ITEMS,
    )
    priority_class_names: list[Annotated[str, Field(max_length=253)]] = Field(
        default_factory=list,
        description="Allowed spec.priorityClassName values.",
        max_length=_MAX_ITEMS,
    )
    tolerations: list[AllowedToleration] = Field(
        default_factory=list,
        description=(
            "Allowed tolerations: each of a sandbox's tolerations must have the key, "
            "operator and value of one of these (and its effect, if that one sets it)."
        ),
        max_length=_MAX_ITEMS,
    )
    node_selectors: dict[
        str, Annotated[list[Annotated[str, Field(max_length=63)]], Field(max_length=_MAX_ITEMS)]
    ] = Field(
        default_factory=dict,
        description=(
            "Allowed spec.nodeSelector entries: node label key to the values a sandbox may "
            "select, e.g. {workload: [sandboxes]}."
        ),
        json_schema_extra={"maxProperties": 64},
    )
    buckets: list[Annotated[str, Field(max_length=63, pattern=S3_BUCKET_PATTERN)]] = Field(
        default_factory=list,
        description=(
            "Allowed spec.userLibrary.bucket values. The operator's CRAFT_S3_BUCKET is "
            "always allowed."
        ),
        max_length=_MAX_ITEMS,
    )
    library_prefixes: list[LibraryPrefixRule] = Field(
        default_factory=list,
        description=(
            "Per namespace, prefix layouts a sandbox may set in spec.userLibrary.prefix "
            "besides Onyx's '{tenantId}/knowledge/{userId}/user_library/'. An empty "
            "prefix is never allowed."
        ),
        max_length=_MAX_ITEMS,
    )


class CraftSandboxPolicy(ApiModel):
    """The platform's policy for what a CraftSandbox may name (one object, named default)."""

    api_version: Literal["craft.onyx.app/v1alpha1"] = Field(
        default="craft.onyx.app/v1alpha1", description="craft.onyx.app/v1alpha1"
    )
    kind: Literal["CraftSandboxPolicy"] = Field(
        default="CraftSandboxPolicy", description="CraftSandboxPolicy"
    )
    metadata: ObjectMeta
    spec: CraftSandboxPolicySpec = Field(default_factory=CraftSandboxPolicySpec)
