"""Server-side apply and targeted faults for the emulator, for the backend client's tests.

The emulator (:mod:`tests.support.emulator`) serves merge and JSON patches only. The client
creates and updates CraftSandboxes with server-side apply (``application/apply-patch+yaml``),
so :func:`server_side_apply` answers those: it creates the object when it is missing and
otherwise merges the applied fields into it, recording the ``fieldManager``. It keeps the
one rule of field ownership a declarative caller must know: a field a manager applied
before and leaves out of its next apply is removed, unless another manager's apply still
sets it (a map the manager applied goes whole, defaulted fields in it too; lists are
atomic, as the CRD declares none as a map). Only apply managers own fields here:
conflicts between managers, ``force`` and the fields merge patches set (which the API
server would keep) are not modelled (the real control plane's tests cover them).

:class:`FailNext` answers the next requests that match with a chosen status, so a test can
say exactly which request fails and how (``tests.support.faults`` draws faults at random).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp.web
import kmock
from kmock._internal import rendering

from tests.support.emulator import KubeEmulator

RequestHook = Callable[[rendering.Request], Any]
#: A field's place in an object: its keys from the root, e.g. ``("spec", "idleTimeout")``.
Path = tuple[str, ...]
#: What an apply never owns: the object's identity.
IDENTITY: frozenset[Path] = frozenset(
    {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}
)


def server_side_apply(emulator: KubeEmulator, managers: list[str] | None = None) -> RequestHook:
    """A ``before_request`` hook serving apply patches (create, or merge into the object,
    removing the fields the manager applied last time and no longer does)."""
    #: Per object (by uid), per manager: the fields its last apply set.
    owned: dict[str, dict[str, frozenset[Path]]] = {}

    async def hook(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        content_type = request.headers.get("Content-Type", "")
        if request.method != kmock.method.PATCH or "apply-patch" not in content_type:
            return None
        manager = request.params.get("fieldManager", "")
        if managers is not None:
            managers.append(manager)
        if not manager:
            return _status(422, "Invalid", "fieldManager is required for apply patch")
        assert request.resource is not None
        assert request.name is not None
        data = dict(request.data or {})
        data.pop("status", None)
        fields = frozenset(applied_fields(data))
        try:
            live = emulator.find(request.resource, request.namespace, request.name)
            if live is None:
                created = emulator._create(request.resource, request.namespace, data)
                owned[created["metadata"]["uid"]] = {manager: fields}
                return aiohttp.web.json_response(created, status=201)
            by_manager = owned.setdefault(live["metadata"]["uid"], {})
            others = [f for m, f in by_manager.items() if m != manager]
            dropped = released(by_manager.get(manager, frozenset()), fields, others)
            updated = emulator._update(
                request.resource,
                request.namespace,
                request.name,
                with_removals(data, dropped),
                None,
                "merge",
            )
        except kmock.KubernetesError as exc:
            return await emulator._render_error(exc)
        by_manager[manager] = fields
        return aiohttp.web.json_response(updated)

    return hook


def applied_fields(obj: Any, prefix: Path = ()) -> Iterator[Path]:
    """The fields an apply configuration sets: its leaves (a list or an empty map is one)."""
    if isinstance(obj, Mapping) and obj:
        for key, value in obj.items():
            yield from applied_fields(value, (*prefix, str(key)))
    elif prefix not in IDENTITY:
        yield prefix


def released(
    before: frozenset[Path], now: frozenset[Path], others: list[frozenset[Path]]
) -> list[Path]:
    """The fields to remove: those the manager applied ``before`` (a map it applied, too),
    leaves out ``now`` and no other manager applies; the outermost of each."""
    kept = _with_parents(now).union(*(_with_parents(fields) for fields in others))
    gone = {path for path in _with_parents(before) if len(path) > 1} - kept
    return [path for path in gone if not any(path[:d] in gone for d in range(1, len(path)))]


def with_removals(data: Mapping[str, Any], removed: list[Path]) -> dict[str, Any]:
    """``data`` as a merge patch that also sets each ``removed`` field to null."""
    patch = copy.deepcopy(dict(data))
    for path in removed:
        node = patch
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = None
    return patch


def _with_parents(fields: frozenset[Path]) -> set[Path]:
    return {path[:depth] for path in fields for depth in range(1, len(path) + 1)}


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
