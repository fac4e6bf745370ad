"""A typed client for CraftSandboxes, for the Onyx backend (synchronous and asyncio).

It needs none of the operator's machinery: only the API models of
:mod:`craft_operator.api`, aiohttp and PyYAML (a test keeps kopf, SQLAlchemy, Alembic,
boto3 and the ``kubernetes`` package out of its imports). docs/onyx-backend.md shows how
each operation of the backend's old sandbox manager maps onto it::

    from craft_operator.client import SandboxClient

    with SandboxClient() as sandboxes:  # in-cluster, or $KUBECONFIG
        sandboxes.ensure(
            "craft", "alice", user_id=user_id, sources=["slack"], workspace={"size": "10Gi"}
        )
        sandboxes.wait_ready("craft", "alice", timeout=300, on_progress=print)
"""

from craft_operator.api.status import WorkspaceStatus
from craft_operator.api.workspace import WORKSPACE_MOUNT, Workspace
from craft_operator.client.aio import FIELD_MANAGER, AsyncSandboxClient
from craft_operator.client.connection import Connection, discover, from_kubeconfig, in_cluster
from craft_operator.client.errors import (
    AdmissionDeniedError,
    ApiError,
    ConfigurationError,
    ConflictError,
    CrdMissingError,
    FieldConflictError,
    ForbiddenError,
    InvalidError,
    InvalidSpecError,
    NotFoundError,
    ObjectTooLargeError,
    SandboxClientError,
    SandboxFailedError,
    SandboxGoneError,
    UnauthorizedError,
    UnreachableError,
    WaitTimeoutError,
)
from craft_operator.client.readiness import ConditionView, Progress
from craft_operator.client.sync import SandboxClient
from craft_operator.client.transport import RetryPolicy

__all__ = [
    "FIELD_MANAGER",
    "WORKSPACE_MOUNT",
    "AdmissionDeniedError",
    "ApiError",
    "AsyncSandboxClient",
    "ConditionView",
    "ConfigurationError",
    "ConflictError",
    "Connection",
    "CrdMissingError",
    "FieldConflictError",
    "ForbiddenError",
    "InvalidError",
    "InvalidSpecError",
    "NotFoundError",
    "ObjectTooLargeError",
    "Progress",
    "RetryPolicy",
    "SandboxClient",
    "SandboxClientError",
    "SandboxFailedError",
    "SandboxGoneError",
    "UnauthorizedError",
    "UnreachableError",
    "WaitTimeoutError",
    "Workspace",
    "WorkspaceStatus",
    "discover",
    "from_kubeconfig",
    "in_cluster",
]
