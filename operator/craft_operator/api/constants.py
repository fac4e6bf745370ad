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
URL_PATTERN = r"^https?://[^\s/?#]+(/[^\s]*)?$"
SOURCE_NAME_PATTERN = r"^[a-z][a-z0-9_]*$"
#: A label value (children carry the tenant in the onyx.app/tenant-id label).
TENANT_ID_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$"
TENANT_ID_MESSAGE = (
    "user.tenantId may contain only letters, digits, '_', '.' and '-', and starts and ends "
    "with a letter or digit"
)
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
IMAGE_PATTERN = r"^[^\s]+$"
QUANTITY_MAX_LENGTH = 64
S3_BUCKET_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"

ANNOTATION_LIBRARY_REVISION = f"{GROUP}/user-library-revision"
ANNOTATION_LAST_ACTIVITY = f"{GROUP}/last-activity"
#: The label naming the sandbox a child belongs to (a claimed pool pod is found by it).
LABEL_SANDBOX = f"{GROUP}/sandbox"
