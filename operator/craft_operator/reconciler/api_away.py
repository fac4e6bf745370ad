"""A pass cut short because the API server was away (restarting, unreachable, not serving
yet) is no bug of the operator's: it is retried without a traceback, and at once when the
API server serves again (see ``handlers.streams.on_stream_failing``), not after the backoff
its failures grew meanwhile. Nor is a pass cut short by a refusal (403): a restarted API
server refuses requests for a moment, until its authorizer has loaded, so it is retried
and logged without a traceback, and as an error only once it has lasted a minute (a
missing grant, or an admission webhook's refusal)."""

from __future__ import annotations

from craft_operator.kube.client import ApiError
from craft_operator.reconciler.queue import RetryableError

#: Seconds a sandbox's or pool's passes may be refused before each refusal is logged as an
#: error: a restarted API server refuses for tens of milliseconds, a missing grant for good.
REFUSED_ERROR_SECONDS = 60.0


class ApiServerAwayError(RetryableError):
    """The API server was away during a pass: retried with backoff, and at once when it is
    back."""


def away(subject: str, exc: ApiError) -> ApiServerAwayError:
    """The error of a pass over ``subject`` that ``exc`` cut short (see :attr:`ApiError.away`)."""
    return ApiServerAwayError(
        f"{subject}: the API server is away ({exc}); retried, at once when it serves again"
    )


class ApiRefusedError(RetryableError):
    """A serving API server refused a request of a pass (403): retried with backoff, and
    logged as an error once its refusals have lasted :data:`REFUSED_ERROR_SECONDS`."""

    error_after = REFUSED_ERROR_SECONDS


def refused(subject: str, exc: ApiError) -> ApiRefusedError:
    """The error of a pass over ``subject`` that the refusal ``exc`` (a 403) cut short; its
    words name the verb and the resource refused."""
    return ApiRefusedError(
        f"{subject}: the API server refused a request ({exc}); retried: a restarted API "
        "server refuses requests until its authorizer has loaded, a refusal that lasts is a "
        "missing grant ('craft-operator doctor' names it) or an admission webhook's"
    )


def expected(subject: str, exc: ApiError) -> RetryableError | None:
    """What a pass over ``subject`` that ``exc`` cut short is, to the work queue: a refusal
    (403, :func:`refused`), the API server away (:func:`away`), or ``None``: an error
    the pass did not expect, raised as it is."""
    if exc.status == 403:
        return refused(subject, exc)
    if exc.away:
        return away(subject, exc)
    return None
