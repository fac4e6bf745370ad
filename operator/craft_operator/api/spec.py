"""The spec of a CraftSandbox: what its owner asks for."""

from __future__ import annotations

import re
from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from craft_operator.api.base import (
    QUANTITY_RULE,
    ApiModel,
    Quantity,
    cel,
    cel_rules,
    cel_string,
    check_class_name,
    check_duration,
    check_pattern,
    check_quantity,
    check_url,
    class_name_rule,
    duration_rules,
    int_or_quantity_cel,
    is_quantity_cel,
    quantity_range_rule,
    storing,
)
from craft_operator.api.constants import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_MAX_LENGTH,
    IMAGE_PATTERN,
    LABEL_VALUE_PATTERN,
    QUALIFIED_NAME_LENGTH_PATTERN,
    QUALIFIED_NAME_MAX_LENGTH,
    QUALIFIED_NAME_PATTERN,
    RESOURCE_NAME_PATTERN,
    S3_BUCKET_PATTERN,
    SOURCE_NAME_PATTERN,
    TENANT_ID_MESSAGE,
    TENANT_ID_PATTERN,
    URL_PATTERN,
    UUID_PATTERN,
    is_extended_resource,
)
from craft_operator.api.durations import Duration
from craft_operator.api.workspace import WORKSPACE_FIELD_RULES, WORKSPACE_KEPT_RULE, Workspace


def _qualified(name: str) -> str:
    """A CEL condition: ``name`` is a qualified name, in format and lengths."""
    return (
        f"{name}.matches({cel_string(QUALIFIED_NAME_PATTERN)}) && "
        f"{name}.matches({cel_string(QUALIFIED_NAME_LENGTH_PATTERN)})"
    )


IMAGE_MESSAGE = (
    "image must be an image reference without spaces (printable ASCII), e.g. craft-sandbox:1.4.4"
)
_QUALIFIED_TEXT = (
    "an optional DNS subdomain prefix of up to 253 characters and '/', then a name of up to 63 "
    "letters, digits, '-', '_' and '.' that starts and ends with a letter or digit"
)
_LABEL_VALUE_TEXT = (
    "up to 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
)
_RESOURCE_TEXT = (
    "cpu, memory, ephemeral-storage, hugepages-<size>, or an extended resource with a domain "
    "prefix (e.g. nvidia.com/gpu)"
)


def is_qualified_name(value: str) -> bool:
    """Whether ``value`` is a qualified name (a label or taint key), as Kubernetes checks."""
    return bool(
        re.fullmatch(QUALIFIED_NAME_PATTERN, value)
        and re.fullmatch(QUALIFIED_NAME_LENGTH_PATTERN, value)
    )


def is_resource_name(name: str) -> bool:
    """Whether ``name`` is a container resource name (cpu, memory, ephemeral-storage,
    hugepages-<size> or a domain-prefixed extended resource), as the pod API checks."""
    return bool(
        re.fullmatch(RESOURCE_NAME_PATTERN, name)
        and re.fullmatch(QUALIFIED_NAME_LENGTH_PATTERN, name)
        and is_extended_name_quotable(name)
    )


def is_extended_name_quotable(name: str) -> bool:
    """Whether an extended resource's name is one the pod API takes: not starting with
    ``requests.``, and ``requests.<name>`` (its quota's name) still a qualified name, so a
    domain of at most 244 characters. A name with no domain, or a ``kubernetes.io/`` one,
    is not an extended resource and passes."""
    if not is_extended_resource(name):
        return True
    return not name.startswith("requests.") and len(name.split("/", 1)[0]) <= _QUOTA_DOMAIN_MAX


def check_node_selector(value: dict[str, str] | None) -> dict[str, str] | None:
    """Python's side of :data:`NodeSelector`'s rules: label keys and label values."""
    for key, item in (value or {}).items():
        if not is_qualified_name(key):
            raise ValueError(f"nodeSelector keys must be label keys: {_QUALIFIED_TEXT}")
        if not re.fullmatch(LABEL_VALUE_PATTERN, item):
            raise ValueError(f"nodeSelector values must be label values: {_LABEL_VALUE_TEXT}")
    return value


#: A pod's node selector: label keys to label values (as the pod API requires).
NodeSelector = dict[
    str,
    Annotated[
        str,
        Field(
            max_length=63,
            json_schema_extra=cel_rules(
                cel(
                    f"self.matches({cel_string(LABEL_VALUE_PATTERN)})",
                    f"nodeSelector values must be label values: {_LABEL_VALUE_TEXT}",
                )
            ),
        ),
    ],
]
NODE_SELECTOR_SCHEMA = {"maxProperties": 32} | cel_rules(
    cel(
        f"self.all(key, key.size() <= {QUALIFIED_NAME_MAX_LENGTH} && {_qualified('key')})",
        f"nodeSelector keys must be label keys: {_QUALIFIED_TEXT}",
    )
)


def _allowed_by_policy(what: str, setting: str) -> str:
    """The sentence of a field's description that names the policy's setting for it."""
    return (
        f" {what} must be allowed by the CraftSandboxPolicy (spec.{setting}), else the "
        "sandbox fails with PolicyDenied."
    )


class UserRef(ApiModel):
    """The Onyx user who owns the sandbox."""

    id: str = Field(
        description=(
            "The Onyx user's UUID. The sandbox's credentials are minted for this user. "
            "Immutable: create a new CraftSandbox for another user."
        ),
        max_length=36,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches({cel_string(UUID_PATTERN)})",
                "user.id must be an Onyx user UUID, e.g. 3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b",
            )
        ),
    )
    tenant_id: str = Field(
        default="public",
        description=(
            "The Onyx tenant the user belongs to; 'public' in single-tenant deployments. Immutable."
        ),
        min_length=1,
        max_length=63,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches({cel_string(TENANT_ID_PATTERN)})",
                TENANT_ID_MESSAGE,
            )
        ),
    )
    email: str | None = Field(
        default=None,
        description=(
            "The user's email address, for whoever reads this object; the operator uses it "
            "nowhere (not in kubectl get's columns, events, logs or the sandbox)."
        ),
        max_length=254,
    )

    @field_validator("id")
    @classmethod
    def _uuid(cls, value: str) -> str:
        if not re.fullmatch(UUID_PATTERN, value):
            raise ValueError("user.id must be an Onyx user UUID")
        return value.lower()

    @field_validator("tenant_id")
    @classmethod
    def _tenant(cls, value: str) -> str | None:
        return check_pattern(value, TENANT_ID_PATTERN, TENANT_ID_MESSAGE)


#: The longest domain of an extended resource: the pod API checks ``requests.<name>``
#: (the name of its quota) as a qualified name, whose domain is at most 253 characters.
_QUOTA_DOMAIN_MAX = 253 - len("requests.")
_QUOTA_NAME_MESSAGE = (
    "an extended resource's name does not start with 'requests.', and its domain has at "
    f"most {_QUOTA_DOMAIN_MAX} characters (Kubernetes names its quota requests.<name>)"
)
#: Below it a quantity's ``asApproximateFloat`` is well within a half of its value, so the
#: int nearest to that float is the value if any is; a larger one (from 1Pi) is left to
#: the pod builder's check (:func:`craft_operator.builders.quantities.overcommit_problem`).
_WHOLE_JUDGED = 2**50
#: A hugepages resource name, whose page size is the quantity after ``hugepages-``.
_HUGEPAGES_NAME = r"^hugepages-[0-9]+(\.[0-9]+)?([KMGTPE]i|[kMGTPE])?$"
DEVICE_FRACTION_MESSAGE = (
    "an extended resource (e.g. nvidia.com/gpu) is counted in whole devices: its request "
    "and limit must be whole numbers"
)
HUGEPAGES_MESSAGE = (
    "hugepages-<size> is counted in whole pages: its request and limit must be multiples "
    "of the page size (e.g. hugepages-2Mi: 4Mi), a whole number of bytes above 0"
)


def _float(quantity: str) -> str:
    """CEL: the approximate float of the quantity expression ``quantity``."""
    return f"{quantity}.asApproximateFloat()"


def _nearest(quantity: str) -> str:
    """CEL: the int nearest to the (nonnegative, judged) quantity expression ``quantity``."""
    return f"int({_float(quantity)} + 0.5)"


def _judged(quantity: str) -> str:
    """CEL: the quantity expression ``quantity`` is nonnegative and small enough for
    :func:`_is_whole` to tell exactly."""
    return f"({_float(quantity)} >= 0.0 && {_float(quantity)} < {float(_WHOLE_JUDGED)})"


def _is_whole(quantity: str) -> str:
    """CEL: the (judged) quantity expression ``quantity`` is a whole number. Its float is
    off a little (``3.00000`` reads 3.0000000000000004), so the nearest int is taken from
    the exact value (``quantity(string(...))`` would be over the cost budget);
    ``isInteger()`` says false for ``1.0`` and ``1000m``."""
    return f"({quantity}.sub({_nearest(quantity)}).compareTo(quantity('0')) == 0)"


def _whole_devices() -> str:
    """CEL on a map of resources: every extended resource's quantity is a whole number
    (one too large to judge, or no quantity, is left to other rules and the operator)."""
    value = "quantity(self[n])"
    return (
        "self.all(n, !n.contains('/') || n.contains('kubernetes.io/') || "
        f"type(self[n]) == int || !{is_quantity_cel('self[n]')} || !{_judged(value)} || "
        f"{_is_whole(value)})"
    )


def _whole_pages() -> str:
    """CEL on a map of resources: every hugepages resource's page size is a whole number
    of bytes above 0 and its quantity a multiple of it, as the pod API requires. A value
    that is not whole (the pod API rounds it up first) or too large to judge, or no
    quantity, is left to other rules and the operator."""
    page, value = "quantity(n.substring(10))", "quantity(self[n])"
    size = _nearest(page)
    pages_of_value = (
        f"(type(self[n]) == int ? (self[n] < 0 || self[n] % {size} == 0) : "
        f"(!{is_quantity_cel('self[n]')} || !{_judged(value)} || !{_is_whole(value)} || "
        f"{_nearest(value)} % {size} == 0))"
    )
    return (
        f"self.all(n, !n.startsWith('hugepages-') || n.size() > 63 || "
        f"!n.matches({cel_string(_HUGEPAGES_NAME)}) || {_float(page)} >= {float(_WHOLE_JUDGED)} || "
        f"({_float(page)} >= 0.5 && {_is_whole(page)} && {pages_of_value}))"
    )


_RESOURCE_NAMES = {"maxProperties": 16} | cel_rules(
    cel(
        f"self.all(name, name.size() <= {QUALIFIED_NAME_MAX_LENGTH} && "
        f"name.matches({cel_string(RESOURCE_NAME_PATTERN)}) && "
        f"name.matches({cel_string(QUALIFIED_NAME_LENGTH_PATTERN)}))",
        f"resource names are {_RESOURCE_TEXT}",
    ),
    cel(
        "self.all(name, !name.contains('/') || name.contains('kubernetes.io/') || "
        f"(!name.startsWith('requests.') && name.matches('^[^/]{{0,{_QUOTA_DOMAIN_MAX}}}/')))",
        _QUOTA_NAME_MESSAGE,
    ),
    cel(_whole_devices(), DEVICE_FRACTION_MESSAGE),
    cel(_whole_pages(), HUGEPAGES_MESSAGE),
)


def _is_quantity(value: str) -> str:
    """CEL: the int-or-string ``value`` is a quantity ``quantity()`` may read."""
    return f"({int_or_quantity_cel(value)})"


def _quantity(value: str) -> str:
    """CEL: the quantity of the int-or-string ``value`` (which :func:`_is_quantity` passed):
    ``quantity()`` reads only strings, so an int is added to a zero quantity."""
    return f"(type({value}) == int ? quantity('0').add({value}) : quantity({value}))"


def _each_request_with_its_limit(condition: str) -> str:
    """CEL on :class:`Resources`: ``condition`` holds for every resource with both a request
    and a limit that are quantities (``R`` and ``L`` stand for them; a value that is no
    quantity is left to :data:`QUANTITY_RULE`). At most 16 of each (maxProperties): the
    estimated cost stays small, two bounded ``matches`` and two comparisons a resource."""
    request, limit = "self.requests[n]", "self.limits[n]"
    compared = condition.format(r=_quantity(request), l=_quantity(limit))
    return (
        "!has(self.requests) || !has(self.limits) || self.requests.all(n, "
        f"!(n in self.limits) || !{_is_quantity(request)} || !{_is_quantity(limit)} || "
        f"{compared})"
    )


REQUEST_ABOVE_LIMIT_MESSAGE = (
    "a request is above the limit of the same resource: lower resources.requests.<name> "
    "or raise resources.limits.<name> (or leave the request out: it defaults to the limit)"
)
OVERCOMMITTED_MESSAGE = (
    "hugepages and extended resources (e.g. nvidia.com/gpu) are never overcommitted: "
    "resources.requests.<name> must equal resources.limits.<name>; leave the request out "
    "(it defaults to the limit)"
)
_NEVER_OVERCOMMITTED = (
    "(n.startsWith('hugepages-') || (n.contains('/') && !n.contains('kubernetes.io/')))"
)


class Resources(ApiModel):
    """Compute resources for the sandbox container (requests and limits).

    A request above its limit (or a device's below it), a fraction of a device and part of
    a huge page are refused at admission only: an object stored under an older CRD still
    parses, and the pod builder refuses it
    (``InvalidResources``), which keeps an earlier pod obeying suspend, sleep and renewal.
    """

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                _each_request_with_its_limit("!{r}.isGreaterThan({l})"), REQUEST_ABOVE_LIMIT_MESSAGE
            ),
            # Below only: a request above its limit is the rule above's.
            cel(
                _each_request_with_its_limit(
                    f"!{_NEVER_OVERCOMMITTED} || !{{r}}.isLessThan({{l}})"
                ),
                OVERCOMMITTED_MESSAGE,
            ),
        )
    )

    requests: dict[str, Quantity] | None = Field(
        default=None,
        description="Minimum resources, e.g. {cpu: '1', memory: 2Gi, ephemeral-storage: 5Gi}.",
        json_schema_extra=_RESOURCE_NAMES,
    )
    limits: dict[str, Quantity] | None = Field(
        default=None,
        description="Maximum resources, e.g. {cpu: '2', memory: 10Gi}.",
        json_schema_extra=_RESOURCE_NAMES,
    )

    @field_validator("requests", "limits")
    @classmethod
    def _quantities(cls, value: dict[str, int | str] | None) -> dict[str, int | str] | None:
        for name, quantity in (value or {}).items():
            if not is_resource_name(name):
                if not is_extended_name_quotable(name):
                    raise ValueError(_QUOTA_NAME_MESSAGE)
                raise ValueError(f"resource names are {_RESOURCE_TEXT}")
            check_quantity(quantity, name)
        return value


class TolerationOperator(StrEnum):
    """How a toleration matches a taint's value."""

    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    """The taint effect a toleration matches."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


_KEYLESS_MESSAGE = (
    "a toleration without a key must have operator: Exists (it tolerates every taint)"
)
_EXISTS_VALUE_MESSAGE = "a toleration with operator: Exists has no value"
_SECONDS_MESSAGE = "tolerationSeconds applies only with effect: NoExecute"


class Toleration(ApiModel):
    """A pod toleration, as in the Kubernetes Pod API."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                "(has(self.key) && self.key != '') || "
                "(has(self.operator) && self.operator == 'Exists')",
                _KEYLESS_MESSAGE,
            ),
            cel(
                "!has(self.operator) || self.operator != 'Exists' || "
                "!has(self.value) || self.value == ''",
                _EXISTS_VALUE_MESSAGE,
            ),
            cel(
                "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                _SECONDS_MESSAGE,
            ),
        )
    )

    key: str | None = Field(
        default=None,
        description="The taint key to match; unset or empty (with operator Exists): any key.",
        max_length=QUALIFIED_NAME_MAX_LENGTH,
        json_schema_extra=cel_rules(
            cel(
                "self == '' || " + _qualified("self"),
                f"a toleration key is a taint key: {_QUALIFIED_TEXT}",
            )
        ),
    )
    operator: TolerationOperator | None = Field(
        default=None, description="Exists or Equal (default Equal)."
    )
    value: str | None = Field(
        default=None,
        description="The taint value to match (operator Equal only).",
        max_length=63,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches({cel_string(LABEL_VALUE_PATTERN)})",
                f"a toleration value is a label value: {_LABEL_VALUE_TEXT}",
            )
        ),
    )
    effect: TaintEffect | None = Field(
        default=None,
        description=(
            "The taint effect to match: NoSchedule, PreferNoSchedule or NoExecute; unset "
            "matches all effects."
        ),
    )
    toleration_seconds: int | None = Field(
        default=None,
        description="How long a NoExecute taint is tolerated before eviction (effect NoExecute).",
        ge=0,
    )

    @field_validator("key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        if value and not is_qualified_name(value):
            raise ValueError(f"a toleration key is a taint key: {_QUALIFIED_TEXT}")
        return value

    @field_validator("value")
    @classmethod
    def _value(cls, value: str | None) -> str | None:
        message = f"a toleration value is a label value: {_LABEL_VALUE_TEXT}"
        return check_pattern(value, LABEL_VALUE_PATTERN, message)

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if not self.key and self.operator is not TolerationOperator.EXISTS:
            raise ValueError(_KEYLESS_MESSAGE)
        if self.operator is TolerationOperator.EXISTS and self.value:
            raise ValueError(_EXISTS_VALUE_MESSAGE)
        if self.toleration_seconds is not None and self.effect is not TaintEffect.NO_EXECUTE:
            raise ValueError(_SECONDS_MESSAGE)
        return self


#: Characters of text the lists a user's actions grow may hold in all: with the rest of the
#: spec, the metadata and the status, a CraftSandbox must fit in one etcd request (1.5 MiB
#: by default), or the API server refuses it with a 500 that names no field. Three bytes a
#: character (CJK paths) still fit.
DISABLED_PATHS_BUDGET = 128 * 1024
#: Every source's five shown scopes at their longest (100 x 5 x 200).
SCOPES_BUDGET = 100_000
DISABLED_PATHS_MESSAGE = (
    f"userLibrary.disabledPaths may hold at most {DISABLED_PATHS_BUDGET} characters in all, "
    "so that the CraftSandbox fits in etcd: disable a directory rather than each file in it"
)
SCOPES_MESSAGE = (
    f"the sources' scopes may hold at most {SCOPES_BUDGET} characters in all, so that the "
    "CraftSandbox fits in etcd: only the first five of each source are shown"
)


class Source(ApiModel):
    """A connected Onyx source, listed in the company-search skill."""

    name: str = Field(
        description=(
            "The Onyx source identifier (a DocumentSource value such as slack, "
            "google_drive or confluence)."
        ),
        min_length=1,
        max_length=64,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches({cel_string(SOURCE_NAME_PATTERN)})",
                "a source name is an Onyx source identifier: lowercase letters, digits "
                "and '_', starting with a letter (e.g. google_drive)",
            )
        ),
    )
    description: str | None = Field(
        default=None,
        description="What this source holds for this user; overrides the built-in description.",
        max_length=500,
    )
    scopes: list[Annotated[str, Field(max_length=200)]] | None = Field(
        default=None,
        description=(
            "Examples of what is reachable in this source (channels, spaces, projects); "
            "the first five are shown."
        ),
        max_length=50,
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str | None:
        message = "a source name is an Onyx source identifier (e.g. google_drive)"
        return check_pattern(value, SOURCE_NAME_PATTERN, message)


class LibraryMode(StrEnum):
    """How the user library reaches the sandbox."""

    EXEC = "Exec"
    JOB = "Job"


#: Without its '/', a prefix also covers its siblings (…/user_library_x/) in the S3 listing
#: and in a sync Job's session policy; an empty one names the whole bucket.
PREFIX_FOLDER_MESSAGE = (
    "userLibrary.prefix is a folder: it ends with '/', e.g. "
    "public/knowledge/<user.id>/user_library/"
)


class UserLibrary(ApiModel):
    """Where the user's uploaded files live in S3 and how they reach the sandbox."""

    bucket: str | None = Field(
        default=None,
        description=(
            "The S3 bucket; defaults to the operator's CRAFT_S3_BUCKET."
            + _allowed_by_policy("Any other bucket", "buckets")
        ),
        min_length=3,
        max_length=63,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches({cel_string(S3_BUCKET_PATTERN)})",
                "userLibrary.bucket must be an S3 bucket name: 3 to 63 lowercase letters, "
                "digits, '.' and '-', starting and ending with a letter or digit",
            )
        ),
    )
    prefix: str | None = Field(
        default=None,
        description=(
            "The key prefix holding the user's files, a folder: it ends with '/'. Defaults "
            "to '<tenantId>/knowledge/<user.id>/user_library/'; any other prefix must be a "
            "layout the CraftSandboxPolicy allows in the namespace (spec.libraryPrefixes), "
            "filled with this sandbox's tenant and user, else the sandbox fails with "
            "PolicyDenied."
        ),
        max_length=1024,
        json_schema_extra=cel_rules(
            cel("!self.startsWith('/')", "userLibrary.prefix is an S3 key prefix: no leading '/'"),
            cel("!self.contains('..')", "userLibrary.prefix must not contain '..'"),
            cel("self.endsWith('/')", PREFIX_FOLDER_MESSAGE),
        ),
    )
    mode: LibraryMode = Field(
        default=LibraryMode.EXEC,
        description=(
            "Exec streams changed files into the running pod over the exec API; Job runs a "
            "sync Job that writes into a volume the pod mounts."
        ),
    )
    exclude: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=list,
        description="Glob patterns (relative to the library root) never copied into the sandbox.",
        max_length=100,
    )
    disabled_paths: list[Annotated[str, Field(min_length=1, max_length=1024)]] = Field(
        default_factory=list,
        description=(
            "Paths the user disabled for sync; a disabled directory disables everything "
            "under it. They are removed from the sandbox. At most "
            f"{DISABLED_PATHS_BUDGET} characters in all."
        ),
        max_length=1000,
        json_schema_extra=cel_rules(
            cel(f"self.map(p, size(p)).sum() <= {DISABLED_PATHS_BUDGET}", DISABLED_PATHS_MESSAGE)
        ),
    )
    size: Quantity | None = Field(
        default=None,
        description=(
            "Job mode: size of the library volume (default: the operator's "
            "CRAFT_LIBRARY_VOLUME_SIZE, 20Gi unless set). The volume grows when this grows "
            "and never shrinks: a smaller size keeps the volume as it is (said in "
            "status.libraryVolume.message)."
        ),
        json_schema_extra=cel_rules(
            QUANTITY_RULE, quantity_range_rule("userLibrary.size", minimum=1)
        ),
    )
    storage_class_name: str | None = Field(
        default=None,
        description=(
            "Job mode: storage class of a new library volume (default: the cluster's "
            "default class). It applies to a new volume only: an existing one keeps its "
            "class until its PVC is deleted and made anew."
        ),
        max_length=DNS_SUBDOMAIN_MAX_LENGTH,
        json_schema_extra=cel_rules(
            class_name_rule("userLibrary.storageClassName", "StorageClass")
        ),
    )

    @field_validator("disabled_paths")
    @classmethod
    def _disabled_paths(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if storing(info) and sum(len(path) for path in value) > DISABLED_PATHS_BUDGET:
            raise ValueError(DISABLED_PATHS_MESSAGE)
        return value

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str | None) -> str | None:
        if value is not None and (value.startswith("/") or ".." in value):
            raise ValueError("userLibrary.prefix is an S3 key prefix: no leading '/', no '..'")
        if value is not None and not value.endswith("/"):
            raise ValueError(PREFIX_FOLDER_MESSAGE)
        return value

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(S3_BUCKET_PATTERN, value):
            raise ValueError("userLibrary.bucket must be an S3 bucket name")
        return value

    @field_validator("size")
    @classmethod
    def _size(cls, value: int | str | None) -> int | str | None:
        return None if value is None else check_quantity(value, "userLibrary.size", minimum=1)

    @field_validator("storage_class_name")
    @classmethod
    def _storage_class(cls, value: str | None) -> str | None:
        return check_class_name(value, "userLibrary.storageClassName", "StorageClass")


class Credentials(ApiModel):
    """How the sandbox's Onyx personal access token is minted."""

    lifetime: Duration = Field(
        default=timedelta(hours=720),
        description=(
            "Lifetime of the sandbox's personal access token; it is renewed before it "
            "expires. Between 1h and 8760h."
        ),
        json_schema_extra=duration_rules(
            "credentials.lifetime",
            "duration(self) >= duration('1h') && duration(self) <= duration('8760h')",
            "credentials.lifetime must be between 1h and 8760h (one year)",
        )
        | {"default": "720h"},
    )

    @field_validator("lifetime")
    @classmethod
    def _lifetime(cls, value: timedelta) -> Any:
        message = "credentials.lifetime must be between 1h and 8760h (one year)"
        return check_duration(value, timedelta(hours=1), timedelta(hours=8760), message)


class PoolRef(ApiModel):
    """A CraftSandboxPool in the sandbox's namespace to take a warm pod from."""

    name: str = Field(
        description=(
            "The pool's name. A Ready pod of it is claimed when its image, resources and "
            "scheduling are what this sandbox's own pod would have; otherwise, or with none "
            "Ready, the sandbox starts cold and an event says why."
        ),
        max_length=63,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches({cel_string(DNS_LABEL_PATTERN)})",
                "poolRef.name must be a CraftSandboxPool's name: lowercase letters, digits "
                "and '-', e.g. warm",
            )
        ),
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str | None:
        return check_pattern(value, DNS_LABEL_PATTERN, "poolRef.name must be a pool's name")


class PodSettingsChecks(ApiModel):
    """The checks of the pod settings a sandbox and a pool both carry (each defines the
    fields): what the pod API would refuse is refused when the spec is read."""

    @field_validator("image", check_fields=False)
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        return check_pattern(value, IMAGE_PATTERN, IMAGE_MESSAGE)

    @field_validator("runtime_class_name", check_fields=False)
    @classmethod
    def _runtime_class(cls, value: str | None) -> str | None:
        return check_class_name(value, "runtimeClassName", "RuntimeClass")

    @field_validator("priority_class_name", check_fields=False)
    @classmethod
    def _priority_class(cls, value: str | None) -> str | None:
        return check_class_name(value, "priorityClassName", "PriorityClass")

    @field_validator("node_selector", check_fields=False)
    @classmethod
    def _node_selector(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_node_selector(value)


class CraftSandboxSpec(PodSettingsChecks):
    """The desired state of a Craft sandbox."""

    model_config = ConfigDict(json_schema_extra=cel_rules(WORKSPACE_KEPT_RULE))

    user: UserRef = Field(
        description="The Onyx user who owns the sandbox.",
        json_schema_extra=cel_rules(
            cel(
                "self.id == oldSelf.id",
                "user.id is immutable; delete this CraftSandbox and create a new one",
            ),
            cel(
                "self.tenantId == oldSelf.tenantId",
                "user.tenantId is immutable; delete this CraftSandbox and create a new one",
            ),
        ),
    )
    image: str | None = Field(
        default=None,
        description=(
            "Sandbox container image; defaults to the operator's CRAFT_SANDBOX_IMAGE."
            + _allowed_by_policy("Any other image", "images")
        ),
        min_length=1,
        max_length=512,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches({cel_string(IMAGE_PATTERN)})",
                IMAGE_MESSAGE,
            )
        ),
    )
    server_url: str | None = Field(
        default=None,
        alias="serverURL",
        description=(
            "URL of the Onyx server the sandbox talks to (becomes ONYX_SERVER_URL); "
            "defaults to the operator's CRAFT_SERVER_URL."
            + _allowed_by_policy("Any other URL", "serverURLs")
        ),
        max_length=2048,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches({cel_string(URL_PATTERN)})",
                "serverURL must be an http:// or https:// URL, e.g. https://onyx.example.com",
            )
        ),
    )
    pool_ref: PoolRef | None = Field(
        default=None,
        description=(
            "Start from a warm pod of this CraftSandboxPool instead of a new one: the "
            "token, SKILL.md and library are delivered into it at claim time."
        ),
    )
    suspend: bool = Field(
        default=False,
        description="True puts the sandbox to sleep: the pod is deleted; credentials are kept.",
    )
    idle_timeout: Duration | None = Field(
        default=None,
        description=(
            "Put the sandbox to sleep when the craft.onyx.app/last-activity annotation is "
            "older than this (e.g. 1h); it wakes when the annotation moves past the moment it "
            "slept. At least 1m. Unset: never sleeps on idleness."
        ),
        json_schema_extra=duration_rules(
            "idleTimeout", "duration(self) >= duration('1m')", "idleTimeout must be at least 1m"
        ),
    )
    resources: Resources | None = Field(
        default=None,
        description=(
            "Sandbox container resources; each request and limit set here replaces that "
            "key of the operator's CRAFT_SANDBOX_RESOURCES. A request is at most its limit "
            "(equal to it for hugepages and extended resources such as nvidia.com/gpu)."
        ),
    )
    runtime_class_name: str | None = Field(
        default=None,
        description=(
            "RuntimeClass for the sandbox pod (e.g. gvisor or kata)."
            + _allowed_by_policy("It", "runtimeClassNames")
        ),
        max_length=DNS_SUBDOMAIN_MAX_LENGTH,
        json_schema_extra=cel_rules(class_name_rule("runtimeClassName", "RuntimeClass")),
    )
    node_selector: NodeSelector | None = Field(
        default=None,
        description=(
            "Node labels the sandbox pod must be scheduled on."
            + _allowed_by_policy("Each key=value", "nodeSelectors")
        ),
        json_schema_extra=NODE_SELECTOR_SCHEMA,
    )
    tolerations: list[Toleration] | None = Field(
        default=None,
        description=(
            "Tolerations for the sandbox pod." + _allowed_by_policy("Each", "tolerations")
        ),
        max_length=32,
    )
    priority_class_name: str | None = Field(
        default=None,
        description=(
            "PriorityClass for the sandbox pod." + _allowed_by_policy("It", "priorityClassNames")
        ),
        max_length=DNS_SUBDOMAIN_MAX_LENGTH,
        json_schema_extra=cel_rules(class_name_rule("priorityClassName", "PriorityClass")),
    )
    sources: list[Source] = Field(
        default_factory=list,
        description=(
            "The user's connected Onyx sources, rendered into the company-search skill. "
            f"Their scopes hold at most {SCOPES_BUDGET} characters in all."
        ),
        max_length=100,
        json_schema_extra=cel_rules(
            cel(
                "self.map(s, has(s.scopes) ? s.scopes.map(x, size(x)).sum() : 0).sum()"
                f" <= {SCOPES_BUDGET}",
                SCOPES_MESSAGE,
            )
        ),
    )
    user_library: UserLibrary = Field(
        default_factory=UserLibrary,
        description="The user's uploaded files, synced from S3 into /workspace/user_library.",
    )
    credentials: Credentials = Field(
        default_factory=Credentials,
        description="Settings for the sandbox's Onyx personal access token.",
    )
    workspace: Workspace | None = Field(
        default=None,
        description=(
            "A volume mounted at /workspace/sessions that survives sleep, wake and a new pod "
            "(a PVC <name>-workspace). Unset: no workspace. Once set, it cannot be removed."
        ),
        json_schema_extra=WORKSPACE_FIELD_RULES,
    )

    @field_validator("server_url")
    @classmethod
    def _server_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        return check_url(value, info, "serverURL must be an http:// or https:// URL")

    @field_validator("sources")
    @classmethod
    def _sources(cls, value: list[Source], info: ValidationInfo) -> list[Source]:
        if not storing(info):
            return value  # read back on every pass: stored, so it fits
        if sum(len(scope) for source in value for scope in source.scopes or ()) > SCOPES_BUDGET:
            raise ValueError(SCOPES_MESSAGE)
        return value

    @field_validator("idle_timeout")
    @classmethod
    def _idle_timeout(cls, value: timedelta | None) -> Any:
        message = "idleTimeout must be at least 1m"
        return check_duration(value, timedelta(minutes=1), timedelta.max, message)
