"""KMock's Kubernetes emulator, extended with the API-server behaviour the operator relies on.

``kmock.KubernetesEmulator`` stores objects and serves list/watch/get/create/patch/delete, but
it merges every write blindly and scans every stored object on each request. A real API
server does more, and kopf (and our operator) depend on it. This module adds, in one place:

- ``metadata.uid``, ``resourceVersion`` (one global counter), ``generation`` (bumped only when
  something outside ``metadata`` and ``status`` changes), ``creationTimestamp``,
  ``metadata.namespace`` taken from the URL, and ``generateName``;
- the ``status`` subresource: writes to the object ignore ``status``, writes to ``/status``
  change nothing else;
- JSON merge patches, JSON patches with ``test`` ops (kopf's finalizer updates rely on a
  failed ``test`` answering 422), and ``PUT`` with optimistic concurrency (409 on a stale
  ``resourceVersion``);
- label selectors on list and watch, and watches that resume from a ``resourceVersion``
  (410 Gone when it is too old) and end after ``timeoutSeconds``;
- finalizers and ``deletionTimestamp``; garbage collection of dependents by
  ``ownerReferences`` when their owner goes away;
- graceful pod deletion: a scheduled pod (``spec.nodeName``, see :meth:`bind_pod`) that has
  not ended is only marked (``deletionTimestamp`` = now + its grace period,
  ``deletionGracePeriodSeconds``) and answered 200; an emulated kubelet removes it
  :attr:`~KubeEmulator.kubelet_delay` seconds later. ``gracePeriodSeconds: 0``, an
  unscheduled pod and an ended one go at once (CheckGracefulDelete in the pod strategy);
- pods' immutable spec (only the image may change), as the real API server enforces;
- validation hooks (e.g. the Kubernetes OpenAPI schemas, the CRD schema and its CEL rules)
  that reject a write with 422, so tests see what the real server would refuse;
- an index by resource and namespace, so a request does not scan every stored object
  (kmock's own lookups are linear, which dominates at thousands of objects);
- ``before_request`` hooks, the place where fault injection plugs in (see
  :mod:`tests.support.faults`);
- the pod exec API over websockets (channel protocol ``v5.channel.k8s.io``), answered by an
  ``exec_handler`` a test installs, so an operator in another process can exec too.

Objects still live in kmock's ``objects`` array, so kmock's assertions and per-object
history (``emulator.objects[resource, ns, name].history``) keep working.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import datetime
import itertools
import json
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, NamedTuple

import aiohttp.web
import jsonpatch
import kmock
from kmock._internal import apps, enums, k8s_dicts, rendering

Resource = kmock.resource
PODS = Resource("v1/pods")
_ENDED = ("Failed", "Succeeded")
Key = tuple[Resource, str | None, str]
Validator = Callable[[Resource, Mapping[str, Any], Mapping[str, Any] | None], list[str]]
Mutator = Callable[[Resource, dict[str, Any]], dict[str, Any]]
RequestHook = Callable[[rendering.Request], Awaitable[aiohttp.web.StreamResponse | None]]
#: Runs a command "in a pod": (namespace, pod, container, argv, stdin) -> (code, out, err).
ExecHandler = Callable[
    [str, str, str, list[str], bytes | None], Awaitable[tuple[int, bytes, bytes]]
]
_EXEC_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/exec$")
_EXEC_FRAME = 32 * 1024
_SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

EVENT_LOG_SIZE = 20_000
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: User-Agent prefixes of the operator's two clients (kopf's and its own), which tell the
#: operator's requests from those of a test or of kubectl.
OPERATOR_AGENTS = ("kopf/", "craft-operator/")
#: The plural of each kind the operator's objects name as their owner.
_OWNER_PLURALS = {"CraftSandbox": "craftsandboxes", "CraftSandboxPool": "craftsandboxpools"}
_METADATA_ONLY_KEYS = {"metadata", "status"}


class Invalid(kmock.KubernetesError):
    """422: the object does not pass validation."""


def _error(
    status: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> kmock.KubernetesError:
    return kmock.KubernetesError(
        status=status, reason=reason, message=message, details=details or {}
    )


def _not_found(resource: Resource, name: str) -> kmock.KubernetesError:
    """The API server's 404 for an object: its Status names the object and its resource."""
    details = {"name": name, "kind": resource.plural}
    if resource.group:
        details["group"] = resource.group
    return _error(404, "NotFound", f'{resource.plural} "{name}" not found', details)


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge recursively, ``null`` removes, the rest replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _content(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in obj.items() if key not in _METADATA_ONLY_KEYS}


_SELECTOR_TERM = re.compile(
    r"^\s*(?P<key>[^\s!=,()]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[^\s,()]*)|\s+(?P<setop>in|notin)\s*\((?P<values>[^)]*)\))?\s*$"
)


def parse_label_selector(text: str) -> Callable[[Mapping[str, str]], bool]:
    """A predicate over labels for a Kubernetes label selector string."""
    checks: list[Callable[[Mapping[str, str]], bool]] = []
    for term in _split_selector(text):
        if term.startswith("!"):
            key = term[1:].strip()
            checks.append(lambda labels, key=key: key not in labels)
            continue
        match = _SELECTOR_TERM.match(term)
        if not match:
            raise _error(400, "BadRequest", f"unable to parse label selector term {term!r}")
        key, op, value, setop = match["key"], match["op"], match["value"], match["setop"]
        if op in ("=", "=="):
            checks.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif op == "!=":
            checks.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif setop:
            values = {item.strip() for item in match["values"].split(",") if item.strip()}
            if setop == "in":
                checks.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                checks.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
        else:
            checks.append(lambda labels, k=key: k in labels)
    return lambda labels: all(check(labels) for check in checks)


def _split_selector(text: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        terms.append(current)
    return [term.strip() for term in terms if term.strip()]


class _Change(NamedTuple):
    """A change in the event log: its kind, the object, and (MODIFIED) the one before."""

    kind: str
    obj: dict[str, Any]
    old: dict[str, Any] | None


class _Watch:
    def __init__(
        self, namespace: str | None, selector: Callable[[Mapping[str, str]], bool] | None
    ) -> None:
        self.namespace = namespace
        self.selector = selector
        #: Watch events; ``None`` cuts the stream (the connection drops, as on a network fault).
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def wants(self, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.selector is None or self.selector(meta.get("labels") or {})

    def event(
        self, kind: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        """The event this watch gets for a change to ``obj`` (``old``: before a change), as
        the API server's cacher converts it (cache_watcher.go, ``convertToWatchEvent``): an
        object that stops matching the selector is DELETED (its previous content at the new
        resourceVersion), one that starts matching is ADDED; ``None`` when not its concern."""
        now = kind != "DELETED" and self.wants(obj)
        before = self.wants(obj if old is None else old)
        if now and before:
            return {"type": kind, "object": copy.deepcopy(dict(obj))}
        if now:
            return {"type": "ADDED", "object": copy.deepcopy(dict(obj))}
        if not before:
            return None
        if old is None:
            return {"type": "DELETED", "object": copy.deepcopy(dict(obj))}
        gone = copy.deepcopy(dict(old))
        gone["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
        return {"type": "DELETED", "object": gone}


class KubeEmulator(kmock.KubernetesEmulator):
    """A stateful Kubernetes API emulator with the server behaviour described in the module."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._index: dict[Resource, dict[tuple[str | None, str], k8s_dicts.Object]] = (
            collections.defaultdict(dict)
        )
        self._dependents: dict[str, set[Key]] = collections.defaultdict(set)
        self._watches: dict[Resource, set[_Watch]] = collections.defaultdict(set)
        self._events: dict[Resource, collections.deque[tuple[int, _Change]]] = (
            collections.defaultdict(lambda: collections.deque(maxlen=EVENT_LOG_SIZE))
        )
        self.validators: list[Validator] = []
        #: Admission mutations (e.g. CRD defaulting), applied before validation.
        self.mutators: list[Mutator] = []
        #: Every write refused by validation (tests assert none they did not expect).
        self.rejections: list[str] = []
        #: API access made outside this emulator's HTTP (an exec double): (verb, group, res).
        self.side_access: list[tuple[str, str, str]] = []
        self.before_request: list[RequestHook] = []
        #: Answers ``pods/exec``; without one, exec requests are not served.
        self.exec_handler: ExecHandler | None = None
        #: Keep every version of every object (kmock's history) or only the latest.
        self.keep_history = True
        #: Keep every served request (``served``); a long benchmark counts in a hook instead.
        self.keep_requests = True
        #: Namespaces that exist even with no object in them (served at /api/v1/namespaces).
        self.namespaces: set[str] = {"default"}
        #: Objects put in every namespace as it first appears (:meth:`add_namespace`), as a
        #: platform's namespace provisioning would: (resource, object without namespace).
        self.namespace_defaults: list[tuple[str, dict[str, Any]]] = []
        self._namespace_watches: set[asyncio.Queue[str]] = set()
        #: Labels of namespaces (set with :meth:`label_namespace`), and their versions.
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self._namespace_versions: dict[str, str] = {}
        #: Seconds the emulated kubelet takes to stop a gracefully deleted pod's containers
        #: and remove it (not the pod's grace period, which only its ``deletionTimestamp``
        #: says). ``None``: it never does; a test ends the pod with :meth:`kubelet_remove`.
        self.kubelet_delay: float | None = 0.2
        # kmock's DSL matches every request against every reaction, which costs ~0.1 s per
        # request once the bundled resources are declared. Requests for declared resources
        # go straight to the handlers below unless a test added reactions of its own.
        self._builtin_payloads = len(self._payloads)
        self._routes: dict[Any, Callable[[rendering.Request], Awaitable[Any]]] = {
            enums.action.LIST: self._serve_list,
            enums.action.FETCH: self._serve_fetch,
            enums.action.CREATE: self._serve_create,
            enums.action.UPDATE: self._serve_update,
            enums.action.DELETE: self._serve_delete,
        }

    def __repr__(self) -> str:
        return f"<KubeEmulator: {len(self.objects)} objects, {len(self._requests)} requests>"

    # -- public helpers for tests -------------------------------------------------------------

    @property
    def served(self) -> list[rendering.Request]:
        """Every request served so far, oldest first."""
        return list(self._requests)

    def writes(self, since: int = 0) -> list[str]:
        """Write requests (``METHOD path``) served after the first ``since`` requests."""
        return [
            f"{request.method.value.upper()} {request.url.path}"
            for request in self.served[since:]
            if request.method.value.upper() in WRITE_METHODS
        ]

    def declare(self, resource: Resource | str, info: kmock.ResourceInfo) -> None:
        """Serve ``resource`` in discovery with ``info`` (kind, namespaced, verbs, ...)."""
        self.resources[resource if isinstance(resource, Resource) else Resource(resource)] = info

    def get(self, resource: Resource | str, namespace: str | None, name: str) -> dict[str, Any]:
        """The stored object, or raise ``KeyError``."""
        obj = self._index[self._resource(resource)].get((namespace, name))
        if obj is None or obj.deleted:
            raise KeyError((str(resource), namespace, name))
        return copy.deepcopy(obj.raw)

    def find(
        self, resource: Resource | str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """The stored object, or ``None``."""
        try:
            return self.get(resource, namespace, name)
        except KeyError:
            return None

    def list(self, resource: Resource | str, namespace: str | None = None) -> list[dict[str, Any]]:
        """All stored objects of ``resource`` (in ``namespace``, if given)."""
        return [copy.deepcopy(obj.raw) for obj in self._select(self._resource(resource), namespace)]

    def history(self, resource: Resource | str, namespace: str | None, name: str) -> int:
        """How many versions the object has had (creations and writes, incl. deletions)."""
        obj = self._index[self._resource(resource)].get((namespace, name))
        return 0 if obj is None else len(obj.history)

    def create(self, resource: Resource | str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create an object as a client would (validation, watch events and all)."""
        namespace = obj.get("metadata", {}).get("namespace")
        return self._create(self._resource(resource), namespace, obj)

    def patch(
        self,
        resource: Resource | str,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Merge-patch an object as a client would (``subresource='status'`` for status)."""
        return self._update(self._resource(resource), namespace, name, patch, subresource, "merge")

    def remove(
        self,
        resource: Resource | str,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
    ) -> dict[str, Any]:
        """Delete an object as a client would (finalizers and pods' grace are respected;
        ``grace_period_seconds=0`` removes a running pod at once, as ``kubectl delete
        --grace-period=0 --force`` does)."""
        options = (
            {} if grace_period_seconds is None else {"gracePeriodSeconds": grace_period_seconds}
        )
        return self._delete(self._resource(resource), namespace, name, options)

    def bind_pod(self, namespace: str, name: str, node: str = "emulated-node") -> dict[str, Any]:
        """Play the scheduler: bind the pod to ``node`` (``spec.nodeName``, which no pod
        update may set: the scheduler writes it through the ``binding`` subresource)."""
        stored = self._index[PODS].get((namespace, name))
        if stored is None or stored.deleted:
            raise _not_found(PODS, name)
        if (stored.raw.get("spec") or {}).get("nodeName"):
            return copy.deepcopy(stored.raw)
        old = copy.deepcopy(stored.raw)
        new = copy.deepcopy(stored.raw)
        new.setdefault("spec", {})["nodeName"] = node
        new["metadata"]["resourceVersion"] = self._next_rv()
        self._store(PODS, (PODS, namespace, name), new)
        self._notify(PODS, "MODIFIED", new, old)
        return copy.deepcopy(new)

    def kubelet_remove(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """Play the kubelet once a gracefully deleted pod's containers stopped: delete it with
        ``gracePeriodSeconds: 0`` (it goes, or waits for its finalizers). Whether it was
        terminating (and still had ``uid``, if given)."""
        stored = self._index[PODS].get((namespace, name))
        if stored is None or stored.deleted:
            return False
        meta = stored.raw["metadata"]
        if not meta.get("deletionTimestamp") or uid not in (None, meta.get("uid")):
            return False
        self._delete(PODS, namespace, name, {"gracePeriodSeconds": 0})
        return True

    def add_namespace(self, name: str) -> None:
        """Make namespace ``name`` exist, with the :attr:`namespace_defaults` in it."""
        if name in self.namespaces:
            return
        self.namespaces.add(name)
        for queue in self._namespace_watches:
            queue.put_nowait(name)
        for resource, default in self.namespace_defaults:
            self._create(self._resource(resource), name, default)

    # -- request handling ---------------------------------------------------------------------

    def _resource(self, resource: Resource | str) -> Resource:
        return resource if isinstance(resource, Resource) else Resource(resource)

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        if not self.keep_requests:
            del self._requests[:-1]  # kmock's own handlers still look for the current one
        for hook in list(self.before_request):
            response = await hook(request)
            if response is not None:
                return response
        if request.url.path == _SSAR_PATH and request.method.value.upper() == "POST":
            # No authorizer here (the operator's access is judged after each test instead):
            # whatever the operator asks about at start, it may do.
            review = {**request.data, "status": {"allowed": True, "reason": "emulated"}}
            return aiohttp.web.json_response(review, status=201)
        self._check_owner_deletion_block(request)
        return await self.serve_unhooked(request)

    def _check_owner_deletion_block(self, request: rendering.Request) -> None:
        """As the OwnerReferencesPermissionEnforcement admission plugin does (OpenShift and
        the local control plane enable it): an operator write that sets
        ``blockOwnerDeletion`` needs ``update`` on its owner's ``finalizers`` subresource."""
        if request.method.value.upper() not in ("POST", "PUT", "PATCH"):
            return
        if not request.headers.get("User-Agent", "").startswith(OPERATOR_AGENTS):
            return
        data = request.data if isinstance(request.data, dict) else {}
        for owner in (data.get("metadata") or {}).get("ownerReferences") or []:
            if owner.get("blockOwnerDeletion"):
                group = owner.get("apiVersion", "").rpartition("/")[0]
                plural = _OWNER_PLURALS.get(owner.get("kind", ""), owner.get("kind", "").lower())
                self.side_access.append(("update", group, f"{plural}/finalizers"))

    async def serve_unhooked(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        """Serve ``request`` past the ``before_request`` hooks (a hook may wrap the serving)."""
        if (
            request.resource is not None
            and request.resource in self.resources
            and len(self._payloads) == self._builtin_payloads
            and request._raw_request is not None
        ):
            return await self._route(request, request._raw_request)
        # Skip kmock's own state-keeping (KubernetesEmulator._handle); ours is in _serve_*.
        return await apps.RawHandler._handle(self, request)

    async def _route(
        self, request: rendering.Request, raw: aiohttp.web.BaseRequest
    ) -> aiohttp.web.StreamResponse:
        """Serve a request for a declared resource directly (see ``_builtin_payloads``)."""
        try:
            if request.action == enums.action.WATCH:
                return await self._stream(raw, self._serve_watch(request))
            route = self._routes.get(request.action)
            if route is None:
                raise _error(405, "MethodNotAllowed", f"{request.method} is not emulated here")
            return aiohttp.web.json_response(await route(request))
        except kmock.KubernetesError as exc:
            return await self._render_error(exc)

    @staticmethod
    async def _stream(
        raw: aiohttp.web.BaseRequest, items: AsyncIterator[Any]
    ) -> aiohttp.web.StreamResponse:
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        try:
            async for item in items:
                if isinstance(item, bytes):
                    if item:
                        await response.write(item)
                    continue
                await response.write(json.dumps(item).encode() + b"\n")
        except (ConnectionResetError, asyncio.CancelledError):
            return response
        await response.write_eof()
        return response

    def open_watches(self) -> int:
        """How many watches are open now (their headers sent, not yet ended)."""
        return sum(len(watches) for watches in self._watches.values())

    def cut_watches(self) -> int:
        """Drop the connection of every open watch, as a flaky network would; how many."""
        cut = 0
        for watches in self._watches.values():
            for watch in watches:
                watch.queue.put_nowait(None)
                cut += 1
        return cut

    def _has_status(self, resource: Resource) -> bool:
        info = self.resources.get(resource) if resource in self.resources else None
        return bool(info is not None and "status" in info.subresources)

    def _notify(
        self,
        resource: Resource,
        kind: str,
        obj: Mapping[str, Any],
        old: Mapping[str, Any] | None = None,
    ) -> None:
        """Log a change (``old``: the object before a MODIFIED one) and send each watch its
        event."""
        change = _Change(
            kind, copy.deepcopy(dict(obj)), None if old is None else copy.deepcopy(dict(old))
        )
        rv = int(obj.get("metadata", {}).get("resourceVersion", "0") or 0)
        self._events[resource].append((rv, change))
        for watch in list(self._watches[resource]):
            event = watch.event(*change)
            if event is not None:
                watch.queue.put_nowait(event)

    def label_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        """Set a namespace's labels (creating it if need be), as ``kubectl label`` would."""
        self.namespaces.add(name)
        self.namespace_labels[name] = dict(labels)
        self._namespace_versions[name] = self._next_rv()
        for queue in self._namespace_watches:
            queue.put_nowait(name)

    def _namespace(self, name: str) -> dict[str, Any]:
        namespace = _namespace(name)
        if name in self.namespace_labels:
            namespace["metadata"]["labels"] = {
                "kubernetes.io/metadata.name": name,
                **self.namespace_labels[name],
            }
            namespace["metadata"]["resourceVersion"] = self._namespace_versions[name]
        return namespace

    def _next_rv(self) -> str:
        self._last_rv = next(self._rv)
        return str(self._last_rv)

    def _validate(
        self, resource: Resource, obj: Mapping[str, Any], old: Mapping[str, Any] | None
    ) -> None:
        problems: list[str] = []
        for validator in self.validators:
            problems.extend(validator(resource, obj, old))
        if problems:
            kind = obj.get("kind", resource.plural)
            name = obj.get("metadata", {}).get("name", "")
            message = f'{kind} "{name}" is invalid: ' + "; ".join(problems)
            self.rejections.append(message)
            raise _error(422, "Invalid", message)

    def _store(self, resource: Resource, key: Key, raw: dict[str, Any]) -> None:
        existing = self._index[resource].get((key[1], key[2]))
        if existing is None:
            self.objects[key] = raw
            self._index[resource][(key[1], key[2])] = self.objects[key]
        else:
            existing.create(raw)  # appends a new version: kmock keeps the history
        if not self.keep_history:
            obj = self._index[resource][(key[1], key[2])]
            del obj.history[:-1]
        for ref in raw.get("metadata", {}).get("ownerReferences") or []:
            if ref.get("uid"):
                self._dependents[ref["uid"]].add(key)

    def _create(
        self, resource: Resource, namespace: str | None, data: Mapping[str, Any]
    ) -> dict[str, Any]:
        if not isinstance(data, Mapping):
            raise _error(400, "BadRequest", "the request body must be a JSON object")
        obj = copy.deepcopy(dict(data))
        meta = obj.setdefault("metadata", {})
        if namespace is not None:
            if meta.get("namespace") not in (None, namespace):
                raise _error(
                    400, "BadRequest", "the namespace of the object does not match the URL"
                )
            meta["namespace"] = namespace
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise _error(422, "Invalid", "metadata.name or metadata.generateName is required")
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        key: Key = (resource, meta.get("namespace"), meta["name"])
        # Every object is created here, so ``namespaces`` already holds every namespace an
        # object lives in (scanning the objects instead made each create O(n)).
        if key[1] and key[1] not in self.namespaces:
            self.add_namespace(key[1])  # as if created with it, like kubectl create -n
        existing = self._index[resource].get((key[1], key[2]))
        if existing is not None and not existing.deleted:
            raise _error(409, "AlreadyExists", f'{resource.plural} "{meta["name"]}" already exists')
        if self._has_status(resource):
            obj.pop("status", None)
        meta["uid"] = str(uuid.uuid4())
        meta["generation"] = 1
        meta["creationTimestamp"] = _now()
        meta.pop("deletionTimestamp", None)
        for mutate in self.mutators:
            obj = mutate(resource, obj)
        meta = obj["metadata"]
        self._validate(resource, obj, None)
        meta["resourceVersion"] = self._next_rv()
        self._store(resource, key, obj)
        self._notify(resource, "ADDED", obj)
        return obj

    def _update(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        data: Any,
        subresource: str | None,
        style: str,
    ) -> dict[str, Any]:
        stored = self._index[resource].get((namespace, name))
        if stored is None or stored.deleted:
            raise _not_found(resource, name)
        old = copy.deepcopy(stored.raw)
        if style == "json":
            try:
                new = jsonpatch.apply_patch(old, data, in_place=False)
            except jsonpatch.JsonPatchTestFailed as exc:
                raise _error(422, "Invalid", f"the JSON patch test failed: {exc}") from None
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise _error(422, "Invalid", f"the JSON patch cannot be applied: {exc}") from None
        elif style == "replace":
            expected = (data.get("metadata") or {}).get("resourceVersion")
            if expected and expected != old["metadata"]["resourceVersion"]:
                raise _error(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.plural} "{name}": the object '
                    "has been modified; please apply your changes to the latest version",
                )
            new = copy.deepcopy(dict(data))
        else:
            expected = (data.get("metadata") or {}).get("resourceVersion")
            if expected and expected != old["metadata"]["resourceVersion"]:
                raise _error(409, "Conflict", f'{resource.plural} "{name}": stale resourceVersion')
            new = _merge_patch(old, data)

        if self._has_status(resource):
            if subresource == "status":
                new = {**old, "status": new.get("status")}
                if new["status"] is None:
                    new.pop("status")
            else:
                new.pop("status", None)
                if "status" in old:
                    new["status"] = old["status"]
        meta = new.setdefault("metadata", {})
        # The server owns these; a client cannot change them.
        for field in (
            "uid",
            "creationTimestamp",
            "namespace",
            "name",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if field in old["metadata"]:
                meta[field] = old["metadata"][field]
            else:
                meta.pop(field, None)
        meta["generation"] = old["metadata"].get("generation", 1)
        if _content(new) != _content(old):
            meta["generation"] += 1
            if resource == Resource("v1/pods"):
                _check_pod_update(old, new)
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        for mutate in self.mutators:
            new = mutate(resource, new)
        meta = new["metadata"]
        if new == old:
            return new  # a no-op write does not bump resourceVersion or notify, like the server
        self._validate(resource, new, old)
        meta["resourceVersion"] = self._next_rv()
        key: Key = (resource, namespace, name)
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")  # else the kubelet removes it
        ):
            self._store(resource, key, new)
            self._finalize(resource, key)
            return new
        self._store(resource, key, new)
        self._notify(resource, "MODIFIED", new, old)
        return new

    def _delete(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        stored = self._index[resource].get((namespace, name))
        if stored is None or stored.deleted:
            raise _not_found(resource, name)
        old = copy.deepcopy(stored.raw)
        obj = copy.deepcopy(stored.raw)
        key: Key = (resource, namespace, name)
        meta = obj["metadata"]
        grace = _grace_period(resource, obj, options or {})
        if meta.get("deletionTimestamp"):
            # Deleting again may only shorten the grace period (BeforeDelete).
            current = meta.get("deletionGracePeriodSeconds")
            if grace is None or (current is not None and grace >= current):
                return obj
        if grace:  # graceful: the kubelet removes the pod once its containers stopped
            due = datetime.datetime.now(tz=datetime.UTC) + datetime.timedelta(seconds=grace)
            meta["deletionTimestamp"] = due.strftime("%Y-%m-%dT%H:%M:%SZ")
            meta["deletionGracePeriodSeconds"] = grace
            meta["resourceVersion"] = self._next_rv()
            self._store(resource, key, obj)
            self._notify(resource, "MODIFIED", obj, old)
            self._schedule_kubelet(namespace, name, meta["uid"])
            return copy.deepcopy(obj)
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp") or meta.get("deletionGracePeriodSeconds"):
                meta["deletionTimestamp"] = _now()
                meta["deletionGracePeriodSeconds"] = 0
                meta["resourceVersion"] = self._next_rv()
                self._store(resource, key, obj)
                self._notify(resource, "MODIFIED", obj, old)
            return obj
        self._finalize(resource, key)
        return obj

    def _schedule_kubelet(self, namespace: str | None, name: str, uid: str) -> None:
        if self.kubelet_delay is None or namespace is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): kubelet_remove ends it
            return
        loop.call_later(self.kubelet_delay, self.kubelet_remove, namespace, name, uid)

    def _finalize(self, resource: Resource, key: Key) -> None:
        stored = self._index[resource][(key[1], key[2])]
        raw = copy.deepcopy(stored.raw)
        raw["metadata"]["resourceVersion"] = self._next_rv()
        stored.delete()
        if not self.keep_history:
            del stored.history[:-1]
        self._notify(resource, "DELETED", raw)
        self._collect_dependents(raw["metadata"].get("uid"))

    def _collect_dependents(self, owner_uid: str | None) -> None:
        """Garbage-collect objects whose only owners are gone (background propagation)."""
        if not owner_uid:
            return
        for key in sorted(self._dependents.pop(owner_uid, set()), key=str):
            resource, namespace, name = key
            stored = self._index[resource].get((namespace, name))
            if stored is None or stored.deleted:
                continue
            refs = stored.raw.get("metadata", {}).get("ownerReferences") or []
            if any(ref.get("uid") == owner_uid for ref in refs):
                self._delete(resource, namespace, name)

    def _select(self, resource: Resource, namespace: str | None) -> Iterable[k8s_dicts.Object]:
        for (obj_namespace, _), obj in self._index[resource].items():
            if obj.deleted:
                continue
            if namespace is None or obj_namespace == namespace:
                yield obj

    def _known(self, request: rendering.Request) -> Resource:
        resource = request.resource
        if resource is None or resource not in self.resources:
            raise kmock.KubernetesResourceNotFoundError()
        return resource

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if raw_request.path.rstrip("/") == "/api/v1/namespaces":
            await raw_request.read()
            return await self._serve_namespaces(raw_request)
        exec_path = _EXEC_PATH.match(raw_request.path)
        if exec_path and self.exec_handler is not None:
            return await self._serve_exec(raw_request, exec_path[1], exec_path[2])
        return await super().__call__(raw_request)

    async def _serve_exec(
        self, raw: aiohttp.web.BaseRequest, namespace: str, pod: str
    ) -> aiohttp.web.StreamResponse:
        """The exec API: refuse like the API server, else stream the command over channels.

        Channel 0 is stdin (closed by the v5 close frame ``255 0``), 1 and 2 stdout and
        stderr, 3 the final status, in the shape ``kubectl exec`` and the Python client read.
        """
        assert self.exec_handler is not None
        stored = self._index[Resource("v1/pods")].get((namespace, pod))
        if stored is None or stored.deleted:
            return aiohttp.web.Response(status=404, text=f'pods "{pod}" not found')
        if (stored.raw.get("status") or {}).get("phase") != "Running":
            return aiohttp.web.Response(status=400, text="container not found or not running")
        ws = aiohttp.web.WebSocketResponse(protocols=("v5.channel.k8s.io", "v4.channel.k8s.io"))
        try:
            await ws.prepare(raw)
        except ConnectionResetError:  # the client is gone (e.g. a killed operator)
            return ws
        stdin: bytearray | None = None
        if raw.query.get("stdin", "").lower() in ("true", "1"):
            stdin = bytearray()
            async for message in ws:
                if message.type != aiohttp.WSMsgType.BINARY or message.data[:2] == b"\xff\x00":
                    break
                if message.data[:1] == b"\x00":
                    stdin.extend(message.data[1:])
        argv = raw.query.getall("command", [])
        container = raw.query.get("container", "")
        try:
            code, out, err = await self.exec_handler(
                namespace, pod, container, argv, None if stdin is None else bytes(stdin)
            )
        except Exception as exc:  # what the handler could not run becomes a failure status
            status: dict[str, Any] = {"status": "Failure", "message": str(exc)}
        else:
            status = {"status": "Success"}
            if code:
                status = {
                    "status": "Failure",
                    "reason": "NonZeroExitCode",
                    "message": f"command terminated with non-zero exit code: {code}",
                    "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
                }
            with contextlib.suppress(ConnectionResetError):
                for channel, data in ((1, out), (2, err)):
                    for start in range(0, len(data), _EXEC_FRAME):
                        await ws.send_bytes(bytes([channel]) + data[start : start + _EXEC_FRAME])
        with contextlib.suppress(ConnectionResetError):
            await ws.send_bytes(b"\x03" + json.dumps({"metadata": {}, **status}).encode())
            await ws.close()
        return ws

    async def _serve_namespaces(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """List or watch namespaces (those any stored object lives in, plus declared ones).

        kmock cannot route ``/api/v1/namespaces`` (it reads "namespaces" as the namespace
        segment of a path). The operator's own requests count against its RBAC, as a real
        API server's authorizer would judge them.
        """
        watching = raw.query.get("watch") in ("true", "1")
        if raw.headers.get("User-Agent", "").startswith(OPERATOR_AGENTS):
            self.side_access.append(("watch" if watching else "list", "", "namespaces"))
        items = [self._namespace(name) for name in sorted(self._known_namespaces())]
        selector = raw.query.get("labelSelector", "")
        if selector:  # equality terms only: what the operator asks
            terms = dict(term.split("=", 1) for term in selector.split(","))
            items = [
                item
                for item in items
                if all(item["metadata"]["labels"].get(k) == v for k, v in terms.items())
            ]
        if not watching:
            return aiohttp.web.json_response(
                {
                    "apiVersion": "v1",
                    "kind": "NamespaceList",
                    "metadata": {"resourceVersion": str(self._last_rv)},
                    "items": items,
                }
            )
        queue: asyncio.Queue[str] = asyncio.Queue()
        self._namespace_watches.add(queue)
        try:
            events = [{"type": "ADDED", "object": item} for item in items]

            async def stream() -> AsyncIterator[dict[str, Any]]:
                for event in events:
                    yield event
                limit = float(raw.query.get("timeoutSeconds") or 300)
                loop = asyncio.get_running_loop()
                deadline = loop.time() + limit
                while (remaining := deadline - loop.time()) > 0:
                    try:
                        name = await asyncio.wait_for(queue.get(), remaining)
                    except TimeoutError:
                        return
                    yield {"type": "MODIFIED", "object": self._namespace(name)}

            return await self._stream(raw, stream())
        finally:
            self._namespace_watches.discard(queue)

    def _known_namespaces(self) -> set[str]:
        return self.namespaces | {
            ns for objects in self._index.values() for (ns, _) in objects if ns
        }

    # -- kmock's fallback handlers, replaced ----------------------------------------------------

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        resource = self._known(request)
        selector = request.params.get("labelSelector")
        wants = parse_label_selector(selector) if selector else None
        items = [
            copy.deepcopy(obj.raw)
            for obj in self._select(resource, request.namespace)
            if wants is None or wants(obj.raw.get("metadata", {}).get("labels") or {})
        ]
        info = self.resources[resource]
        return {
            "apiVersion": resource.group + "/" + resource.version
            if resource.group
            else resource.version,
            "kind": f"{info.kind}List" if info.kind else "List",
            "metadata": {"resourceVersion": str(self._last_rv)},
            "items": items,
        }

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[rendering.Payload]:
        resource = self._known(request)
        yield b""  # send the headers now: the stream is open even if nothing happens
        selector = request.params.get("labelSelector")
        watch = _Watch(request.namespace, parse_label_selector(selector) if selector else None)
        since = request.params.get("resourceVersion")
        timeout = float(request.params.get("timeoutSeconds") or 0) or None
        backlog: list[dict[str, Any]]
        if since and since != "0":
            log = self._events[resource]
            if log and int(since) < log[0][0] - 1 and len(log) == log.maxlen:
                yield {
                    "type": "ERROR",
                    "object": {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "code": 410,
                        "reason": "Expired",
                        "message": f"too old resource version: {since}",
                    },
                }
                return
            converted = (watch.event(*change) for rv, change in log if rv > int(since))
            backlog = [event for event in converted if event is not None]
        else:
            backlog = [
                {"type": "ADDED", "object": copy.deepcopy(obj.raw)}
                for obj in self._select(resource, request.namespace)
                if watch.wants(obj.raw)
            ]
        self._watches[resource].add(watch)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            for event in backlog:
                yield event
            while True:
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    return
                try:
                    event = await asyncio.wait_for(watch.queue.get(), remaining)
                except TimeoutError:
                    return
                if event is None:
                    if request._raw_request is not None and request._raw_request.transport:
                        request._raw_request.transport.abort()
                    return
                yield event
        finally:
            self._watches[resource].discard(watch)

    async def _serve_fetch(self, request: rendering.Request) -> rendering.Payload:
        resource = self._known(request)
        assert request.name is not None
        stored = self._index[resource].get((request.namespace, request.name))
        if stored is None or stored.deleted:
            raise _not_found(resource, request.name)
        return copy.deepcopy(stored.raw)

    async def _serve_create(self, request: rendering.Request) -> rendering.Payload:
        resource = self._known(request)
        return self._create(resource, request.namespace, request.data)

    async def _serve_update(self, request: rendering.Request) -> rendering.Payload:
        resource = self._known(request)
        assert request.name is not None
        content_type = request.headers.get("Content-Type", "")
        if request.method == enums.method.PUT:
            style = "replace"
        elif "json-patch" in content_type:
            style = "json"
        elif "merge-patch" in content_type or "strategic-merge-patch" in content_type:
            style = "merge"
        else:
            raise _error(415, "UnsupportedMediaType", f"unsupported patch type {content_type!r}")
        return self._update(
            resource, request.namespace, request.name, request.data, request.subresource, style
        )

    async def _serve_delete(self, request: rendering.Request) -> rendering.Payload:
        resource = self._known(request)
        if request.name is None:
            raise _error(405, "MethodNotAllowed", "collection deletion is not emulated")
        options = request.data if isinstance(request.data, dict) else {}
        stored = self._index[resource].get((request.namespace, request.name))
        if stored is not None and not stored.deleted:
            _check_preconditions(options.get("preconditions") or {}, stored.raw)
        return self._delete(resource, request.namespace, request.name, options)


def _grace_period(
    resource: Resource, obj: Mapping[str, Any], options: Mapping[str, Any]
) -> int | None:
    """The grace period of a deletion of ``obj``: ``None`` for none (the object goes at once,
    finalizers permitting), else seconds (0: at once, as asked). Only pods have one, and
    only when scheduled and not ended (the pod strategy's CheckGracefulDelete)."""
    if resource != PODS:
        return None
    spec = obj.get("spec") or {}
    if not spec.get("nodeName") or (obj.get("status") or {}).get("phase") in _ENDED:
        return 0
    asked = options.get("gracePeriodSeconds")
    return int(spec.get("terminationGracePeriodSeconds", 30) if asked is None else asked)


def _check_preconditions(preconditions: Mapping[str, Any], stored: Mapping[str, Any]) -> None:
    """A DELETE's preconditions against the stored object, as the API server checks them
    (storage.Preconditions.Check): 409 Conflict when one differs."""
    for field in ("uid", "resourceVersion"):
        wanted = preconditions.get(field)
        have = stored.get("metadata", {}).get(field)
        if wanted and have != wanted:
            raise _error(
                409,
                "Conflict",
                f"Precondition failed: {field} in precondition: {wanted}, {field} in object "
                f"meta: {have}",
            )


def _check_pod_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """The API server forbids changing a pod's spec except images (and a few more fields)."""
    old_spec = copy.deepcopy(dict(old.get("spec") or {}))
    new_spec = copy.deepcopy(dict(new.get("spec") or {}))
    for spec in (old_spec, new_spec):
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            container.pop("image", None)
        spec.pop("activeDeadlineSeconds", None)
        spec.pop("tolerations", None)
    if old_spec != new_spec:
        raise _error(
            422,
            "Invalid",
            "Pod is invalid: spec: Forbidden: pod updates may not change fields other than "
            "`spec.containers[*].image`, `spec.activeDeadlineSeconds` or `spec.tolerations`",
        )


def _namespace(name: str) -> dict[str, Any]:
    # The API server labels every namespace with its name (immutable).
    labels = {"kubernetes.io/metadata.name": name}
    metadata = {"name": name, "uid": name, "labels": labels}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def declare_core_resources(emulator: KubeEmulator) -> None:
    """Serve the built-in Kubernetes resources in discovery (pods, secrets, jobs, ...)."""
    emulator.resources.load_bundled()


def declare_peering_resources(emulator: KubeEmulator) -> None:
    """Serve kopf's ClusterKopfPeering (``crds/clusterkopfpeerings.kopf.dev.yaml``)."""
    emulator.declare(
        Resource("kopf.dev", "v1", "clusterkopfpeerings"),
        kmock.ResourceInfo(
            kind="ClusterKopfPeering",
            singular="clusterkopfpeering",
            namespaced=False,
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
        ),
    )
