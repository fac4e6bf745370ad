"""The policy check itself: a pure function of a sandbox, the policy and the namespace.

The ValidatingAdmissionPolicy in ``manifests/policy/admission-policy.yaml`` states the same
rules in CEL; the cluster tier runs one table of cases through both. The operator's defaults
(CRAFT_SANDBOX_IMAGE, CRAFT_SERVER_URL, CRAFT_S3_BUCKET) are allowed here even when named
explicitly; the admission policy cannot see them and allows them only when left unset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from craft_operator.api.models import CraftSandbox, Toleration, TolerationOperator
from craft_operator.config import Settings
from craft_operator.policy.models import (
    DEFAULT_LAYOUT,
    POLICY_NAME,
    TENANT_LABEL,
    TENANT_PLACEHOLDER,
    USER_PLACEHOLDER,
    AllowedToleration,
    CraftSandboxPolicySpec,
)

POLICY_REF = "the CraftSandboxPolicy"
#: Why a refusal refuses where there is no CraftSandboxPolicy object at all.
NO_POLICY = f"there is no CraftSandboxPolicy {POLICY_NAME}, so only the operator's defaults apply"


@dataclass(frozen=True)
class Violation:
    """One thing the sandbox names that the platform does not allow.

    ``needs_policy``: a CraftSandboxPolicy could allow it (an image, a bucket, a layout...);
    False for what nothing allows (another tenant's namespace, an empty prefix).
    """

    field: str
    message: str
    needs_policy: bool = True


def image_allowed(image: str, entries: Sequence[str]) -> bool:
    """Whether ``image`` matches an allowed entry: a path prefix ending in ``/``, a
    repository (the repository untagged, which Kubernetes pulls as its ``:latest``, or any
    tag or digest of it), or an exact reference with a tag or a digest.

    What follows a repository's ``:`` is a tag only if it holds no ``/``: ``busybox:5000/x``
    is repository ``x`` of the registry host ``busybox``, not a tag of ``busybox``. A
    tagged entry allows that reference only: not with a digest appended, which the
    runtime pulls by, whatever the tag says.
    """
    for entry in entries:
        if "@" in entry or _has_tag(entry):
            if image == entry:
                return True
        elif entry.endswith("/"):
            if image.startswith(entry):
                return True
        elif image == entry or image.startswith(entry + "@") or _tagged(image, entry):
            return True
    return False


def _has_tag(reference: str) -> bool:
    """Whether ``reference`` ends in a tag (a ``:`` in its last path component)."""
    return ":" in reference.rsplit("/", 1)[-1]


def _tagged(image: str, repository: str) -> bool:
    """Whether ``image`` is ``repository`` with a tag (no ``/`` after the ``:``)."""
    return image.startswith(repository + ":") and "/" not in image[len(repository) + 1 :]


def image_permitted(image: str, policy: CraftSandboxPolicySpec, settings: Settings) -> bool:
    """Whether ``image`` is the operator's default or an image ``policy`` allows."""
    return image == settings.sandbox_image or image_allowed(image, policy.images)


def server_url_allowed(url: str, entries: Sequence[str]) -> bool:
    """Whether ``url`` is one of ``entries``, a trailing ``/`` aside (never by prefix)."""
    return any(url in (entry, entry + "/") or entry == url + "/" for entry in entries)


def toleration_allowed(toleration: Toleration, allowed: Sequence[AllowedToleration]) -> bool:
    """Whether an allowed toleration has this one's key, operator and value (unset means
    empty, and Equal) and either no effect or the same one."""

    def shape(item: Toleration | AllowedToleration) -> tuple[str, str, str]:
        operator = item.operator or TolerationOperator.EQUAL
        return (item.key or "", operator.value, item.value or "")

    return any(
        shape(entry) == shape(toleration)
        and (entry.effect is None or entry.effect == toleration.effect)
        for entry in allowed
    )


def expand_layout(layout: str, tenant_id: str, user_id: str) -> str:
    """A prefix layout with the sandbox's tenant and user filled in."""
    return layout.replace(TENANT_PLACEHOLDER, tenant_id).replace(USER_PLACEHOLDER, user_id)


def allowed_layouts(policy: CraftSandboxPolicySpec, namespace: str) -> list[str]:
    """Onyx's layout, then those the policy allows in ``namespace``."""
    extra = [
        prefix
        for rule in policy.library_prefixes
        if namespace in rule.namespaces
        for prefix in rule.prefixes
    ]
    return [DEFAULT_LAYOUT, *extra]


def _prefix_violation(
    sandbox: CraftSandbox, policy: CraftSandboxPolicySpec, namespace: str, *, policy_missing: bool
) -> Violation | None:
    prefix = sandbox.spec.user_library.prefix
    if prefix is None:
        return None
    field = "spec.userLibrary.prefix"
    if prefix.strip("/") == "":
        return Violation(
            field, f"{field} must not be empty: that names the whole bucket", needs_policy=False
        )
    if not prefix.endswith("/"):
        # Without it the prefix also covers its siblings (…/user_library_x/) in the S3
        # listing and in the Job's session policy (prefix*).
        return Violation(
            field, f"{field} {prefix} must end with '/' (a folder)", needs_policy=False
        )
    user = sandbox.spec.user
    allowed = [
        expand_layout(layout, user.tenant_id, user.id)
        for layout in allowed_layouts(policy, namespace)
    ]
    if prefix in allowed:
        return None
    unset = f"{field} {prefix} is not this user's library: leave it unset (it is then {allowed[0]})"
    if policy_missing:
        return Violation(
            field, f"{unset}; {NO_POLICY} (a policy lists other layouts in spec.libraryPrefixes)"
        )
    return Violation(
        field,
        f"{unset} or use a layout {POLICY_REF} allows in namespace {namespace} "
        "(spec.libraryPrefixes)",
    )


def evaluate(
    sandbox: CraftSandbox,
    policy: CraftSandboxPolicySpec,
    *,
    namespace_labels: dict[str, str],
    settings: Settings,
    policy_missing: bool = False,
) -> list[Violation]:
    """Everything ``sandbox`` names that ``policy`` and its namespace do not allow.

    An empty list: the sandbox is allowed. Unset fields are always allowed (the operator's
    defaults apply), and so are the defaults themselves. ``policy_missing``: there is no
    CraftSandboxPolicy object (``policy`` is then empty), and the messages say so.
    """
    spec = sandbox.spec
    namespace = sandbox.metadata.namespace or ""
    found: list[Violation] = []

    def refuse(field: str, value: str, setting: str) -> None:
        why = (
            f": {NO_POLICY} (a policy lists more in spec.{setting})"
            if policy_missing
            else f" by {POLICY_REF} (spec.{setting})"
        )
        found.append(Violation(field, f"{field} {value} is not allowed{why}"))

    tenant = namespace_labels.get(TENANT_LABEL)
    if tenant is not None and spec.user.tenant_id != tenant:
        found.append(
            Violation(
                "spec.user.tenantId",
                f"namespace {namespace} belongs to tenant {tenant} (label {TENANT_LABEL}): "
                f"spec.user.tenantId {spec.user.tenant_id} is not allowed here",
                needs_policy=False,
            )
        )
    image, url = spec.image, spec.server_url
    if image is not None and not image_permitted(image, policy, settings):
        refuse("spec.image", str(image), "images")
    own = [settings.server_url] if settings.server_url else []
    if url is not None and not server_url_allowed(url, [*own, *policy.server_urls]):
        refuse("spec.serverURL", str(url), "serverURLs")
    runtime = spec.runtime_class_name
    if runtime is not None and runtime not in policy.runtime_class_names:
        refuse("spec.runtimeClassName", runtime, "runtimeClassNames")
    priority = spec.priority_class_name
    if priority is not None and priority not in policy.priority_class_names:
        refuse("spec.priorityClassName", priority, "priorityClassNames")
    for index, toleration in enumerate(spec.tolerations or []):
        if not toleration_allowed(toleration, policy.tolerations):
            refuse(f"spec.tolerations[{index}]", f"(key {toleration.key or '*'!s})", "tolerations")
    for key, value in (spec.node_selector or {}).items():
        if value not in policy.node_selectors.get(key, []):
            refuse("spec.nodeSelector", f"{key}={value}", "nodeSelectors")
    bucket = spec.user_library.bucket
    if bucket is not None and bucket != settings.s3_bucket and bucket not in policy.buckets:
        refuse("spec.userLibrary.bucket", bucket, "buckets")
    prefix = _prefix_violation(sandbox, policy, namespace, policy_missing=policy_missing)
    if prefix is not None:
        found.append(prefix)
    return found


def describe(violations: Sequence[Violation]) -> str:
    """One message for a condition or an event: every violation, in spec order."""
    return "not allowed by the platform: " + "; ".join(item.message for item in violations)
