"""What can go wrong when the backend talks to CraftSandboxes, each saying what to do.

Every error is a :class:`SandboxClientError`. API refusals are :class:`ApiError` subclasses
by status; a sandbox that cannot become Ready is :class:`SandboxFailedError` (its condition's
type, reason and message); a wait that ran out of time is :class:`WaitTimeoutError`.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The Role the backend's service account needs, shipped in the repository.
RBAC_MANIFEST = "manifests/backend/rbac.yaml"


class SandboxClientError(Exception):
    """Base of every error the client raises."""


class InvalidSpecError(SandboxClientError, ValueError):
    """The arguments do not make a valid CraftSandbox; nothing was sent."""


class ConfigurationError(SandboxClientError):
    """No usable connection: no kubeconfig, no in-cluster service account, or a broken one."""


@dataclass(frozen=True)
class Request:
    """What was asked: the verb as RBAC names it, the resource, where and which."""

    verb: str
    namespace: str | None = None
    name: str | None = None
    resource: str = "craftsandboxes.craft.onyx.app"

    def describe(self) -> str:
        """E.g. ``patch craftsandboxes.craft.onyx.app "alice" in namespace "team-a"``."""
        text = f"{self.verb} {self.resource}"
        if self.name:
            text += f' "{self.name}"'
        if self.namespace:
            text += f' in namespace "{self.namespace}"'
        return text


class ApiError(SandboxClientError):
    """The API server refused a request (``status`` 0: it could not be reached)."""

    def __init__(self, status: int, reason: str, message: str, request: Request) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.request = request
        #: Seconds the server asked the client to wait (429, 503), if it said.
        self.retry_after: float | None = None
        super().__init__(self.explain())

    def explain(self) -> str:
        """The sentence shown to people: what failed, why, and what to do."""
        return f"{self.request.describe()}: HTTP {self.status} {self.reason}: {self.message}"

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later (throttled, server or network trouble)."""
        return self.status in (0, 408, 429) or self.status >= 500


class UnreachableError(ApiError):
    """The API server could not be reached, or answered with something that is not the API.

    ``sent`` is False when no connection was made (refused, no such host, connect timeout):
    the request never reached the server, so it cannot have been carried out.
    """

    def __init__(
        self, status: int, reason: str, message: str, request: Request, *, sent: bool = True
    ) -> None:
        self.sent = sent
        super().__init__(status, reason, message, request)

    def explain(self) -> str:
        """Where it tried and what to check."""
        return (
            f"{self.request.describe()}: {self.message}; check that the API server is up and "
            "that KUBECONFIG (or the in-cluster service account) points at it"
        )


class UnauthorizedError(ApiError):
    """401: the credentials were not accepted."""

    def explain(self) -> str:
        """Which credentials to look at."""
        return (
            f"{self.request.describe()}: the API server did not accept the credentials "
            "(HTTP 401): the token may have expired or belong to another cluster; refresh "
            "the kubeconfig's user, or the service account token"
        )


class ForbiddenError(ApiError):
    """403: the identity lacks a grant; the message names it and the Role that has it."""

    def explain(self) -> str:
        """The missing grant and where to get it."""
        return (
            f"{self.request.describe()} is forbidden: {self.message}. The Onyx backend's "
            "service account needs the Role in "
            f"{RBAC_MANIFEST} (create, patch, get, watch, delete on "
            "craftsandboxes.craft.onyx.app) bound to it in this namespace"
        )


class AdmissionDeniedError(ApiError):
    """403 from admission, not from RBAC: the platform's CraftSandboxPolicy (a
    ValidatingAdmissionPolicy), an admission webhook or a ResourceQuota refused the
    request. The request must change; the backend's Role is not the problem."""

    def explain(self) -> str:
        """What refused it and where to look."""
        return (
            f"{self.request.describe()} was refused at admission: {self.message}. The "
            "platform's CraftSandboxPolicy (kubectl get craftsandboxpolicy default -o yaml), "
            "an admission webhook or a ResourceQuota does not allow this request"
        )


#: How the API server says admission refused a request: a ValidatingAdmissionPolicy
#: ("denied request"), a webhook ("denied the request"), a ResourceQuota.
ADMISSION_DENIALS = ("denied request", "denied the request", "exceeded quota")


class NotFoundError(ApiError):
    """404: the sandbox (or its namespace) does not exist."""


class CrdMissingError(NotFoundError):
    """404 for the resource itself: the CraftSandbox CRD is not installed."""

    def explain(self) -> str:
        """How to install it."""
        return (
            f"{self.request.describe()}: the API server does not serve CraftSandboxes: the "
            "CRD is not installed (kubectl apply --server-side -k crds/ from the operator's "
            "repository)"
        )


class ConflictError(ApiError):
    """409: the object changed since it was read (retried by the client where it can)."""


class FieldConflictError(ConflictError):
    """409 on server-side apply: another field manager owns a field the backend set.

    The client never forces by default, so it does not fight GitOps or the operator.
    """

    def explain(self) -> str:
        """Which fields, and the two ways out."""
        return (
            f"{self.request.describe()}: another field manager owns fields the backend "
            f"applied: {self.message}. Stop setting them in one of the two, or pass "
            "force=True to take them over"
        )


class InvalidError(ApiError):
    """422: the API server (the CRD's schema and rules) refused the object."""

    def explain(self) -> str:
        """The server's own words: the CRD's messages say what a field must be."""
        return f"{self.request.describe()} was refused as invalid: {self.message}"


class ObjectTooLargeError(InvalidError):
    """The object is larger than the API server stores (etcd's request limit, 1.5 MiB by
    default; a 413, or a 500 saying ``request is too large``): the same request never
    succeeds, so it is not retried."""

    @property
    def retryable(self) -> bool:
        """Never: only a smaller object is stored."""
        return False

    def explain(self) -> str:
        """What to shorten."""
        return (
            f"{self.request.describe()} is larger than the API server stores "
            f"(HTTP {self.status}: {self.message}): shorten its spec, the sources' scopes or "
            "userLibrary.disabledPaths first"
        )


@dataclass(frozen=True)
class ConditionReport:
    """One condition as the sandbox reports it (``status`` ``True``, ``False`` or ``Unknown``)."""

    type: str
    reason: str
    message: str
    status: str = "False"


class SandboxFailedError(SandboxClientError):
    """The sandbox cannot become Ready (or do what was waited for: ``goal``) until someone
    changes something.

    ``condition_type``, ``reason`` and ``message`` are those of the condition that says why
    (e.g. ``PodReady``, ``PolicyDenied``); ``phase`` is the sandbox's phase.
    """

    def __init__(
        self,
        namespace: str,
        name: str,
        phase: str | None,
        condition: ConditionReport,
        *,
        goal: str = "become Ready",
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.phase = phase
        self.condition_type = condition.type
        self.reason = condition.reason
        self.message = condition.message
        super().__init__(
            f'CraftSandbox "{name}" in namespace "{namespace}" cannot {goal} '
            f"(phase {phase or 'unknown'}): {condition.type} is {condition.status}, "
            f"{condition.reason}: {condition.message} (kubectl describe csb {name} -n {namespace})"
        )


class SandboxGoneError(SandboxClientError):
    """The sandbox was deleted, or is being deleted, while the client waited for it or
    ensured it."""


class WaitTimeoutError(SandboxClientError, TimeoutError):
    """A wait ran out of time; ``last`` says where the sandbox was then."""

    def __init__(self, what: str, seconds: float, last: str) -> None:
        self.seconds = seconds
        self.last = last
        super().__init__(f"{what} did not happen within {seconds:g} s; last seen: {last}")
