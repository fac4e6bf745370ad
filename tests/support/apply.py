"""Server-side apply and targeted faults for the emulator, for the backend client's tests.

The emulator (:mod:`tests.support.emulator`) serves merge and JSON patches only. The client
creates and updates CraftSandboxes with server-side apply (``application/apply-patch+yaml``),
so :func:`server_side_apply` answers those: it creates the object when it is missing and
otherwise merges the applied fields into it, recording the ``fieldManager``. It does not
track field ownership (the real control plane's tests cover conflicts between managers).

:class:`FailNext` answers the next requests that match with a chosen status, so a test can
say exactly which request fails and how (``tests.support.faults`` draws faults at random).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp.web
import kmock
from kmock._internal import rendering

from tests.support.emulator import KubeEmulator

RequestHook = Callable[[rendering.Request], Any]


def server_side_apply(emulator: KubeEmulator, managers: list[str] | None = None) -> RequestHook:
    """A ``before_request`` hook serving apply patches (create, or merge into the object)."""

    async def hook(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        content_type = request.headers.get("Content-Type", "")
        if request.method != kmock.method.PATCH or "apply-patch" not in content_type:
            return None
        if managers is not None:
            managers.append(request.params.get("fieldManager", ""))
        if not request.params.get("fieldManager"):
            return _status(422, "Invalid", "fieldManager is required for apply patch")
        assert request.resource is not None
        assert request.name is not None
        data = dict(request.data or {})
        data.pop("status", None)
        try:
            if emulator.find(request.resource, request.namespace, request.name) is None:
                created = emulator._create(request.resource, request.namespace, data)
                return aiohttp.web.json_response(created, status=201)
            updated = emulator._update(
                request.resource, request.namespace, request.name, data, None, "merge"
            )
        except kmock.KubernetesError as exc:
            return await emulator._render_error(exc)
        return aiohttp.web.json_response(updated)

    return hook


def _status(code: int, reason: str, message: str, **details: Any) -> aiohttp.web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
        "details": details,
    }
    return aiohttp.web.Response(status=code, text=json.dumps(body), content_type="application/json")


@dataclass
class FailNext:
    """A ``before_request`` hook: the next ``count`` requests ``method`` (and, if given, whose
    ``Content-Type`` contains ``content_type``) get ``code``; the rest pass."""

    method: str
    code: int
    count: int = 1
    content_type: str = ""
    retry_after: str | None = None
    watch: bool = False
    #: The Status's message (else one naming the test).
    message: str | None = None
    #: Requests answered with the fault so far.
    failed: list[str] = field(default_factory=list)

    async def __call__(self, request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        """Fail the request if it matches and faults remain; ``None`` lets it through."""
        if len(self.failed) >= self.count or request.method.value.upper() != self.method:
            return None
        if self.content_type not in request.headers.get("Content-Type", ""):
            return None
        if (request.params.get("watch") in ("true", "1")) != self.watch:
            return None
        self.failed.append(f"{self.method} {request.url.path}")
        reasons = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError", 403: "Forbidden"}
        reason = reasons.get(self.code, "Error")
        message = self.message or f"{reason} (injected by the test)"
        response = _status(self.code, reason, message)
        if self.retry_after is not None:
            response.headers["Retry-After"] = self.retry_after
        return response
