"""The CraftSandbox API's names, the patterns its fields must match, and its annotations.

Shared by the spec models, the CRD generator and whatever names the API's objects.
"""

from __future__ import annotations

GROUP = "craft.onyx.app"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "CraftSandbox"
PLURAL = "craftsandboxes"
SINGULAR = "craftsandbox"
SHORT_NAMES = ["csb"]
CATEGORIES = ["craft"]

#: Longest CraftSandbox name: children are named ``<name>-credentials`` and
#: ``<name>-library-<n>``, and a Job's name must fit a 63-character label value.
MAX_NAME_LENGTH = 45
UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
#: Character classes are spelled in printable ASCII (``!-~``), never ``\s``: ``\s`` is
#: [\t\n\f\r ] in RE2 (CEL, the CRD's patterns) but also \v, U+00A0, U+2028, ... in Python's
#: re and pydantic's regex, and every pattern here is checked by both.
#: An http(s) URL: a host (any printable ASCII but '/', '?', '#'), then an optional path.
URL_PATTERN = r'^https?://[!-"$-.0->@-~]+(/[!-~]*)?$'
#: The URLs the CRDs before 2026-11-27 (fc0cd74) admitted, for objects read back only (never
#: in a CRD): their ``[^\s]``, as RE2 reads it ([\t\n\f\r ]), so any other character too,
#: e.g. an internationalised host name (``https://onyx.bücher.example``).
STORED_URL_PATTERN = r"^https?://[^\t\n\f\r /?#]+(/[^\t\n\f\r ]*)?$"
SOURCE_NAME_PATTERN = r"^[a-z][a-z0-9_]*$"
#: A label value (children carry the tenant in the onyx.app/tenant-id label).
TENANT_ID_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$"
TENANT_ID_MESSAGE = (
    "user.tenantId may contain only letters, digits, '_', '.' and '-', and starts and ends "
    "with a letter or digit"
)
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: A Kubernetes quantity as ``resource.ParseQuantity`` reads it: a signed decimal number,
#: then a binary suffix, a decimal suffix or an integer exponent (``1e3``; never ``1e1.5``).
#: The exponent has at most three digits: ParseQuantity truncates a longer one to 32 bits
#: (``1e4294967296`` is 1 to Kubernetes).
QUANTITY_PATTERN = (
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,3})?$"
)
QUANTITY_MAX_LENGTH = 64
#: Every quantity is below this: 8Pi (2^53), far more than any pod or volume asks for, and
#: far from 2^63-1, the most Kubernetes represents (it caps a larger binary quantity, e.g.
#: ``99999Ei``, at that; the operator refuses to parse one above it).
QUANTITY_LIMIT = "8Pi"
QUANTITY_LIMIT_VALUE = 2**53
#: An image reference: printable ASCII, no spaces.
IMAGE_PATTERN = r"^[!-~]+$"
#: A DNS subdomain (RFC 1123) as Kubernetes names classes: runtime, priority, storage.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_SUBDOMAIN_MAX_LENGTH = 253
#: A qualified name (a label key, a taint key, an extended resource): an optional DNS
#: subdomain prefix and '/', then a name of letters, digits, '-', '_' and '.'.
QUALIFIED_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
#: A qualified name's lengths: a prefix of at most 253 characters, a name of at most 63.
QUALIFIED_NAME_LENGTH_PATTERN = r"^([^/]{1,253}/)?[^/]{1,63}$"
QUALIFIED_NAME_MAX_LENGTH = 317
#: A label value: empty, or up to 63 letters, digits, '-', '_' and '.', starting and ending
#: with a letter or digit.
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
#: A container resource name: a standard one (cpu, memory, ephemeral-storage, hugepages-<size>)
#: or an extended resource, which has a domain prefix (e.g. nvidia.com/gpu).
RESOURCE_NAME_PATTERN = (
    r"^(cpu|memory|ephemeral-storage|hugepages-[0-9]+(\.[0-9]+)?([KMGTPE]i|[kMGTPE])?|"
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$"
)
S3_BUCKET_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"


def is_extended_resource(name: str) -> bool:
    """Whether resource ``name`` is an extended one (e.g. ``nvidia.com/gpu``): it has a
    domain, and Kubernetes counts any name with ``kubernetes.io/`` in it as native."""
    return "/" in name and "kubernetes.io/" not in name


ANNOTATION_LIBRARY_REVISION = f"{GROUP}/user-library-revision"
#: The longest revision synced: it is copied into the status and onto a sync Job, whose
#: annotations the API server bounds at 256 KiB in all.
MAX_LIBRARY_REVISION = 1024
ANNOTATION_LAST_ACTIVITY = f"{GROUP}/last-activity"
#: Written by ``craft-operator credentials revoke`` (the PAT's id): a new value has the
#: operator check the sandbox's PAT in the database at once, not at its next recheck.
ANNOTATION_PAT_REVOKED = f"{GROUP}/pat-revoked"
#: The label naming the sandbox a child belongs to (a claimed pool pod is found by it).
LABEL_SANDBOX = f"{GROUP}/sandbox"
