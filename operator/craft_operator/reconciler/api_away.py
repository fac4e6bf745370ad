"""A pass cut short because the API server was away (restarting, unreachable, not serving
yet) is no bug of the operator's: it is retried without a traceback, and at once when the
API server serves again (see ``handlers.streams.on_stream_failing``), not after the backoff
its failures grew meanwhile."""

from __future__ import annotations

from craft_operator.kube.client import ApiError
from craft_operator.reconciler.queue import RetryableError


class ApiServerAwayError(RetryableError):
    """The API server was away during a pass: retried with backoff, and at once when it is
    back."""


def away(subject: str, exc: ApiError) -> ApiServerAwayError:
    """The error of a pass over ``subject`` that ``exc`` cut short (see :attr:`ApiError.away`)."""
    return ApiServerAwayError(
        f"{subject}: the API server is away ({exc}); retried, at once when it serves again"
    )
