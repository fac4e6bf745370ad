"""Specification of the operator's Kubernetes client, against the KMock emulator over HTTP."""

from __future__ import annotations

import asyncio
import base64
import socket
from typing import Any

import aiohttp.web
import kopf
import pytest
from kmock._internal import rendering

from craft_operator import __version__
from craft_operator.kube.client import (
    CONFIGMAPS,
    JOBS,
    LIST_RESTARTS,
    PODS,
    RETIRED_SESSION_GRACE,
    SANDBOXES,
    SECRET_QUOTED,
    SECRETS,
    ApiError,
    ConflictError,
    InvalidError,
    KubeClient,
    NotFoundError,
    withhold_quoted_secrets,
)
from tests.support.emulator import KubeEmulator
from tests.unit.kube.conftest import NAMESPACE, configmap


def agents(emulator: KubeEmulator) -> set[str]:
    """The User-Agent headers of every request the emulator served."""
    return {request.headers.get("User-Agent", "") for request in emulator.served}


# -- paths ---------------------------------------------------------------------------------


def test_core_kinds_live_under_api_v1_and_others_under_apis() -> None:
    assert PODS.path("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert SECRETS.path(None) == "/api/v1/secrets"
    assert JOBS.path("ns") == "/apis/batch/v1/namespaces/ns/jobs"
    assert SANDBOXES.path("ns", "a", "status") == (
        "/apis/craft.onyx.app/v1alpha1/namespaces/ns/craftsandboxes/a/status"
    )


# -- reads and writes ----------------------------------------------------------------------


async def test_create_then_get_returns_the_stored_object(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    created = await kube.create(CONFIGMAPS, configmap("a", x="1"))
    assert created["metadata"]["uid"]
    assert created["metadata"]["resourceVersion"]
    fetched = await kube.get(CONFIGMAPS, NAMESPACE, "a")
    assert fetched == created
    assert emulator.get("v1/configmaps", NAMESPACE, "a")["data"] == {"x": "1"}


async def test_the_client_knows_the_versions_its_own_writes_produced(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    """What tells a watch event's echo of the operator's write from someone else's change."""
    created = await kube.create(CONFIGMAPS, configmap("a", x="1"))
    patched = await kube.patch(CONFIGMAPS, NAMESPACE, "a", {"data": {"x": "2"}})
    emulator.patch("v1/configmaps", NAMESPACE, "a", {"data": {"x": "3"}})  # someone else
    theirs = await kube.get(CONFIGMAPS, NAMESPACE, "a")

    uid = created["metadata"]["uid"]
    assert kube.wrote(uid, created["metadata"]["resourceVersion"])
    assert kube.wrote(uid, patched["metadata"]["resourceVersion"])
    assert not kube.wrote(uid, theirs["metadata"]["resourceVersion"])  # read, not written


async def test_the_client_remembers_only_its_latest_writes(
    kube: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator that runs for months writes millions of versions: it keeps the latest
    ``WRITTEN_REMEMBERED``, forgetting the oldest first, not every one it ever wrote."""
    monkeypatch.setattr("craft_operator.kube.client.WRITTEN_REMEMBERED", 3)
    created = await kube.create(CONFIGMAPS, configmap("a", x="0"))
    uid = created["metadata"]["uid"]
    versions = [created["metadata"]["resourceVersion"]]
    for value in range(1, 4):
        patched = await kube.patch(CONFIGMAPS, NAMESPACE, "a", {"data": {"x": str(value)}})
        versions.append(patched["metadata"]["resourceVersion"])

    assert not kube.wrote(uid, versions[0]), "the oldest forgotten"
    assert all(kube.wrote(uid, version) for version in versions[1:])


async def test_list_filters_by_label_selector(kube: KubeClient) -> None:
    await kube.create(CONFIGMAPS, configmap("a", {"team": "x"}))
    await kube.create(CONFIGMAPS, configmap("b", {"team": "y"}))
    await kube.create(CONFIGMAPS, configmap("c", {}))
    everything = await kube.list(CONFIGMAPS, NAMESPACE)
    selected = await kube.list(CONFIGMAPS, NAMESPACE, label_selector="team=x")
    assert {item["metadata"]["name"] for item in everything} >= {"a", "b", "c"}
    assert [item["metadata"]["name"] for item in selected] == ["a"]


def serve_list_pages(emulator: KubeEmulator, pages: list[Any]) -> list[dict[str, str]]:
    """Answer the configmap lists with ``pages`` in turn (``(names, continue)`` or an
    HTTP status); the query of each list request, in order."""
    asked: list[dict[str, str]] = []

    async def hook(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.method.value.upper() != "GET" or not request.url.path.endswith("/configmaps"):
            return None
        asked.append(dict(request.params))
        page = pages[len(asked) - 1]
        if isinstance(page, int):
            return aiohttp.web.json_response({"kind": "Status", "reason": "Expired"}, status=page)
        names, token = page
        items = [configmap(name) for name in names]
        return aiohttp.web.json_response({"metadata": {"continue": token}, "items": items})

    emulator.before_request.insert(0, hook)
    return asked


async def test_a_list_is_fetched_a_page_at_a_time(kube: KubeClient, emulator: KubeEmulator) -> None:
    asked = serve_list_pages(emulator, [(["a", "b"], "t1"), (["c", "d"], "t2"), (["e"], "")])

    found = [
        obj["metadata"]["name"] async for obj in kube.iterate(CONFIGMAPS, NAMESPACE, page_size=2)
    ]

    assert found == ["a", "b", "c", "d", "e"]
    assert [(query["limit"], query.get("continue")) for query in asked] == [
        ("2", None),
        ("2", "t1"),
        ("2", "t2"),
    ]


async def test_an_expired_continue_token_starts_the_list_again(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    asked = serve_list_pages(emulator, [(["a", "b"], "t1"), 410, (["a", "b", "c"], "")])

    found = [obj["metadata"]["name"] for obj in await kube.list(CONFIGMAPS, NAMESPACE)]

    assert found == ["a", "b", "a", "b", "c"]
    assert [query.get("continue") for query in asked] == [None, "t1", None]


async def test_a_list_whose_continue_tokens_always_expire_fails_after_a_few_restarts(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    """A server that refuses every token (an aggregated API, a proxy that keeps no state):
    the expiry is the list's failure, which its callers back off from."""
    asked = serve_list_pages(emulator, [(["a"], "t1"), 410] * (LIST_RESTARTS + 2))

    with pytest.raises(ApiError) as caught:
        await kube.list(CONFIGMAPS, NAMESPACE)

    assert caught.value.status == 410
    assert [query.get("continue") for query in asked] == [None, "t1"] * (LIST_RESTARTS + 1)


async def test_a_merge_patch_changes_only_what_it_names(kube: KubeClient) -> None:
    await kube.create(CONFIGMAPS, configmap("a", x="1", y="2"))
    patched = await kube.patch(CONFIGMAPS, NAMESPACE, "a", {"data": {"x": "9", "y": None}})
    assert patched["data"] == {"x": "9"}


async def test_a_patch_with_the_current_resource_version_applies(kube: KubeClient) -> None:
    created = await kube.create(CONFIGMAPS, configmap("a", x="1"))
    version = created["metadata"]["resourceVersion"]
    patch = {"metadata": {"resourceVersion": version}, "data": {"x": "2"}}
    patched = await kube.patch(CONFIGMAPS, NAMESPACE, "a", patch)
    assert patched["data"] == {"x": "2"}
    assert patched["metadata"]["resourceVersion"] != version


async def test_a_patch_with_a_stale_resource_version_is_a_conflict(kube: KubeClient) -> None:
    created = await kube.create(CONFIGMAPS, configmap("a", x="1"))
    await kube.patch(CONFIGMAPS, NAMESPACE, "a", {"data": {"x": "2"}})
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}}
    with pytest.raises(ConflictError) as caught:
        await kube.patch(CONFIGMAPS, NAMESPACE, "a", {**stale, "data": {"x": "3"}})
    assert caught.value.status == 409
    assert caught.value.retryable


async def test_creating_an_existing_object_is_a_conflict(kube: KubeClient) -> None:
    await kube.create(CONFIGMAPS, configmap("a"))
    with pytest.raises(ConflictError) as caught:
        await kube.create(CONFIGMAPS, configmap("a"))
    assert caught.value.reason == "AlreadyExists"


async def test_reading_a_missing_object_is_not_found(kube: KubeClient) -> None:
    with pytest.raises(NotFoundError) as caught:
        await kube.get(CONFIGMAPS, NAMESPACE, "missing")
    assert caught.value.status == 404
    assert not caught.value.retryable


async def test_patching_a_missing_object_is_not_found(kube: KubeClient) -> None:
    with pytest.raises(NotFoundError):
        await kube.patch(CONFIGMAPS, NAMESPACE, "missing", {"data": {"x": "1"}})


async def test_an_object_the_schema_refuses_is_invalid_and_not_retryable(
    kube: KubeClient,
) -> None:
    bad = configmap("a")
    bad["data"] = {"x": 1}  # ConfigMap data values are strings
    with pytest.raises(InvalidError) as caught:
        await kube.create(CONFIGMAPS, bad)
    assert caught.value.status == 422
    assert caught.value.reason == "Invalid"
    assert "data" in caught.value.message
    assert not caught.value.retryable


async def test_delete_removes_the_object_and_a_second_delete_returns_none(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    await kube.create(CONFIGMAPS, configmap("a"))
    assert await kube.delete(CONFIGMAPS, NAMESPACE, "a") is not None
    assert emulator.find("v1/configmaps", NAMESPACE, "a") is None
    assert await kube.delete(CONFIGMAPS, NAMESPACE, "a") is None


async def test_delete_with_the_current_uid_deletes(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    created = await kube.create(CONFIGMAPS, configmap("a"))
    await kube.delete(CONFIGMAPS, NAMESPACE, "a", uid=created["metadata"]["uid"])
    assert emulator.find("v1/configmaps", NAMESPACE, "a") is None


async def test_delete_with_another_uid_is_a_conflict_and_keeps_the_object(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    await kube.create(CONFIGMAPS, configmap("a"))
    with pytest.raises(ConflictError):
        await kube.delete(CONFIGMAPS, NAMESPACE, "a", uid="an-older-incarnation")
    assert emulator.find("v1/configmaps", NAMESPACE, "a") is not None


async def test_delete_with_a_stale_resource_version_is_a_conflict_and_keeps_the_object(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    created = await kube.create(CONFIGMAPS, configmap("a"))
    meta = created["metadata"]
    emulator.patch("v1/configmaps", NAMESPACE, "a", {"data": {"changed": "since"}})
    with pytest.raises(ConflictError):
        await kube.delete(
            CONFIGMAPS, NAMESPACE, "a", uid=meta["uid"], resource_version=meta["resourceVersion"]
        )
    assert emulator.find("v1/configmaps", NAMESPACE, "a") is not None


async def test_delete_sends_background_propagation_and_the_uid_precondition(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    created = await kube.create(CONFIGMAPS, configmap("a"))
    await kube.delete(CONFIGMAPS, NAMESPACE, "a", uid=created["metadata"]["uid"])
    [request] = [r for r in emulator.served if r.method.value.upper() == "DELETE"]
    assert request.data == {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "propagationPolicy": "Background",
        "preconditions": {"uid": created["metadata"]["uid"]},
    }


# -- errors from the server ----------------------------------------------------------------


@pytest.fixture
def answer_with(emulator: KubeEmulator) -> Any:
    """Make the emulator answer every request with ``status`` and ``body`` (text or JSON)."""

    def install(status: int, body: Any) -> None:
        async def hook(request: rendering.Request) -> aiohttp.web.StreamResponse:
            if isinstance(body, str):
                return aiohttp.web.Response(status=status, text=body)
            return aiohttp.web.json_response(body, status=status)

        emulator.before_request.insert(0, hook)

    return install


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(400, False), (403, False), (408, True), (429, True), (500, True), (503, True)],
)
async def test_other_errors_are_api_errors_retryable_when_trying_later_may_help(
    kube: KubeClient, answer_with: Any, status: int, retryable: bool
) -> None:
    answer_with(status, {"kind": "Status", "reason": "Something", "message": "it broke"})
    with pytest.raises(ApiError) as caught:
        await kube.get(CONFIGMAPS, NAMESPACE, "a")
    error = caught.value
    assert type(error) is ApiError
    assert (error.status, error.reason, error.message) == (status, "Something", "it broke")
    assert error.retryable is retryable
    assert str(error) == f"{status} Something: it broke"


async def test_a_non_json_error_body_becomes_the_message(
    kube: KubeClient, answer_with: Any
) -> None:
    answer_with(502, "<html>bad gateway</html>")
    with pytest.raises(ApiError) as caught:
        await kube.get(CONFIGMAPS, NAMESPACE, "a")
    assert (caught.value.reason, caught.value.message) == ("Error", "<html>bad gateway</html>")


async def test_a_long_error_message_is_cut(kube: KubeClient, answer_with: Any) -> None:
    answer_with(500, {"reason": "InternalError", "message": "x" * 5000})
    with pytest.raises(ApiError) as caught:
        await kube.get(CONFIGMAPS, NAMESPACE, "a")
    assert len(caught.value.message) == 1000


async def test_a_success_answer_that_is_not_json_is_a_retryable_api_error(
    kube: KubeClient, answer_with: Any
) -> None:
    """E.g. a proxy's login page with 200: a typed error, not a JSONDecodeError."""
    answer_with(200, "<html>proxy login</html>")
    with pytest.raises(ApiError) as caught:
        await kube.get(CONFIGMAPS, NAMESPACE, "a")
    assert caught.value.reason == "InvalidResponse"
    assert caught.value.retryable
    assert "GET /api/v1/namespaces/craft-sandboxes/configmaps/a" in caught.value.message


#: JSON nested past what any decoder reads (as a broken proxy or a hostile one may send).
TOO_DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    "body",
    ["", "null", "[]", '"ok"', TOO_DEEP],
    ids=["empty", "null", "list", "string", "too-deep"],
)
async def test_a_success_answer_that_is_no_object_is_a_retryable_api_error(
    kube: KubeClient, answer_with: Any, body: str
) -> None:
    """Every caller reads an object out of a success: anything else is a proxy's doing."""
    answer_with(200, body)
    with pytest.raises(ApiError) as caught:
        await kube.get(CONFIGMAPS, NAMESPACE, "a")
    assert (caught.value.status, caught.value.reason) == (0, "InvalidResponse")
    assert caught.value.retryable
    assert "GET /api/v1/namespaces/craft-sandboxes/configmaps/a" in caught.value.message


async def test_a_list_whose_answer_is_no_object_is_a_retryable_api_error(
    kube: KubeClient, answer_with: Any
) -> None:
    answer_with(200, "null")
    with pytest.raises(ApiError) as caught:
        await kube.list(CONFIGMAPS, NAMESPACE)
    assert caught.value.reason == "InvalidResponse"


async def test_an_empty_answer_to_a_delete_is_no_object_and_no_error(
    kube: KubeClient, answer_with: Any
) -> None:
    """The callers of a deletion look for the object in its answer, and do without."""
    answer_with(200, "")
    assert await kube.delete(CONFIGMAPS, NAMESPACE, "a") == {}


async def test_an_error_body_nested_too_deeply_becomes_the_message(
    kube: KubeClient, answer_with: Any
) -> None:
    answer_with(500, TOO_DEEP)
    with pytest.raises(ApiError) as caught:
        await kube.get(CONFIGMAPS, NAMESPACE, "a")
    assert (caught.value.status, caught.value.reason) == (500, "Error")
    assert caught.value.message == TOO_DEEP[:500]


async def test_a_server_that_never_answers_is_a_retryable_api_error_after_the_timeout(
    emulator: KubeEmulator,
) -> None:
    """An API server that takes the request and says nothing (overloaded, a proxy holding
    it) must not hold the pass that asked for ever: ``request_timeout`` bounds the call."""
    never = asyncio.Event()

    async def hold(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        await never.wait()
        return None

    emulator.before_request.insert(0, hold)
    client = KubeClient(request_timeout=0.5)
    client.configure(kopf.ConnectionInfo(server=str(emulator.url).rstrip("/"), insecure=True))
    try:
        with pytest.raises(ApiError) as caught:
            async with asyncio.timeout(10):
                await client.get(CONFIGMAPS, NAMESPACE, "a")
    finally:
        never.set()
        await client.close()
    assert (caught.value.status, caught.value.reason) == (0, "Unreachable")
    assert caught.value.retryable


async def test_an_unreachable_server_is_a_retryable_api_error_with_status_0() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = KubeClient(request_timeout=5)
    client.configure(kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}", insecure=True))
    try:
        with pytest.raises(ApiError) as caught:
            await client.get(CONFIGMAPS, NAMESPACE, "a")
    finally:
        await client.close()
    assert caught.value.status == 0
    assert caught.value.reason == "Unreachable"
    assert caught.value.retryable
    assert "GET /api/v1/namespaces/craft-sandboxes/configmaps/a" in caught.value.message


async def test_an_unconfigured_client_says_it_has_no_credentials() -> None:
    with pytest.raises(ApiError, match="no credentials") as caught:
        await KubeClient().get(CONFIGMAPS, NAMESPACE, "a")
    assert caught.value.status == 0


# -- identity and accounting ---------------------------------------------------------------


async def test_every_request_says_it_is_the_craft_operator(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    await kube.create(CONFIGMAPS, configmap("a"))
    await kube.get(CONFIGMAPS, NAMESPACE, "a")
    assert agents(emulator) == {f"craft-operator/{__version__}"}


async def test_requests_are_counted_by_verb(kube: KubeClient) -> None:
    await kube.create(CONFIGMAPS, configmap("a"))
    await kube.get(CONFIGMAPS, NAMESPACE, "a")
    await kube.list(CONFIGMAPS, NAMESPACE)
    await kube.patch(CONFIGMAPS, NAMESPACE, "a", {"data": {"x": "1"}})
    await kube.delete(CONFIGMAPS, NAMESPACE, "a")
    with pytest.raises(NotFoundError):
        await kube.get(CONFIGMAPS, NAMESPACE, "a")
    assert kube.requests == {"POST": 1, "GET": 3, "PATCH": 1, "DELETE": 1}


async def test_reconfiguring_switches_server_and_keeps_working(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    await kube.create(CONFIGMAPS, configmap("a"))
    kube.configure(kopf.ConnectionInfo(server=str(emulator.url), insecure=True))
    assert (await kube.get(CONFIGMAPS, NAMESPACE, "a"))["metadata"]["name"] == "a"


async def test_a_bearer_token_is_sent_when_configured(emulator: KubeEmulator) -> None:
    client = KubeClient()
    client.configure(
        kopf.ConnectionInfo(server=str(emulator.url), insecure=True, token="sa-token-123")
    )
    try:
        await client.list(CONFIGMAPS, NAMESPACE)
    finally:
        await client.close()
    assert emulator.served[-1].headers.get("Authorization") == "Bearer sa-token-123"


async def test_streams_have_a_session_of_their_own_on_the_same_credentials() -> None:
    client = KubeClient()
    with pytest.raises(ApiError, match="no credentials"):
        client.stream_session()
    client.configure(kopf.ConnectionInfo(server="https://api.test:6443", token="t0k3n"))
    requests, _ = client._ensure_session()
    streams = client.stream_session()

    assert streams is client.stream_session()  # one session for every stream
    assert streams is not requests  # so streams never hold the requests' connections
    assert streams.headers["Authorization"] == requests.headers["Authorization"] == "Bearer t0k3n"
    assert streams.timeout.total is None  # a stream lasts as long as its caller lets it
    assert streams.connector is not None
    assert requests.connector is not None
    # One SSL context per login (loading the CA costs milliseconds), shared by both.
    assert streams.connector._ssl is requests.connector._ssl  # type: ignore[attr-defined]

    client.configure(kopf.ConnectionInfo(server="https://api.test:6443", token="n3w"))
    assert client.stream_session() is not streams
    assert client.stream_session().headers["Authorization"] == "Bearer n3w"
    await client.close()
    assert streams.closed


async def test_the_sessions_of_an_earlier_login_are_closed_after_a_grace_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Requests, execs and watches still on them may finish; re-logins over months do not
    pile up sessions and their sockets."""
    now = [1000.0]
    monkeypatch.setattr("craft_operator.kube.client.time.monotonic", lambda: now[0])
    client = KubeClient()
    client.configure(kopf.ConnectionInfo(server="https://api.test:6443", token="first"))
    first = client.stream_session()

    client.configure(kopf.ConnectionInfo(server="https://api.test:6443", token="second"))
    second = client.stream_session()
    assert not first.closed  # just retired: in-flight work may still use it

    now[0] += RETIRED_SESSION_GRACE
    client.configure(kopf.ConnectionInfo(server="https://api.test:6443", token="third"))
    client.stream_session()
    await asyncio.sleep(0)
    assert first.closed
    assert not second.closed  # retired just now

    await client.close()
    assert second.closed


async def test_a_retired_streams_session_stays_open_as_long_as_an_exec_may_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A library sync's exec may take half an hour: its session outlives the others'."""
    now = [1000.0]
    monkeypatch.setattr("craft_operator.kube.client.time.monotonic", lambda: now[0])
    client = KubeClient(stream_grace=1800)
    client.configure(kopf.ConnectionInfo(server="https://api.test:6443", token="first"))
    requests, _ = client._ensure_session()
    streams = client.stream_session()

    client.configure(kopf.ConnectionInfo(server="https://api.test:6443", token="second"))
    now[0] += RETIRED_SESSION_GRACE
    client.stream_session()
    await asyncio.sleep(0)
    assert requests.closed
    assert not streams.closed

    client.configure(kopf.ConnectionInfo(server="https://api.test:6443", token="third"))
    now[0] += 1800
    client.stream_session()
    await asyncio.sleep(0)
    assert streams.closed
    await client.close()


SCOPED_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSCOPEDKEY"


@pytest.mark.parametrize(
    "quoted",
    [SCOPED_KEY, base64.b64encode(SCOPED_KEY.encode()).decode(), SCOPED_KEY[10:22]],
    ids=["as-written", "base64", "a-piece"],
)
@pytest.mark.parametrize("field", ["data", "stringData"])
def test_a_refused_secret_writes_message_quoting_its_data_is_withheld(
    quoted: str, field: str
) -> None:
    value = base64.b64encode(SCOPED_KEY.encode()).decode() if field == "data" else SCOPED_KEY
    body = {"kind": "Secret", field: {"AWS_SECRET_ACCESS_KEY": value}}
    refused = ApiError(403, "Forbidden", f"denied: AWS_SECRET_ACCESS_KEY={quoted!r}")
    said = withhold_quoted_secrets(refused, "/api/v1/namespaces/a/secrets", body)
    assert (said.status, said.reason, said.message) == (403, "Forbidden", SECRET_QUOTED)
    assert SCOPED_KEY not in str(said)


def test_only_a_secrets_refusal_is_looked_at() -> None:
    refused = ApiError(422, "Invalid", f"data.x: {SCOPED_KEY}")
    body = {"data": {"x": SCOPED_KEY}}
    assert withhold_quoted_secrets(refused, "/api/v1/namespaces/a/configmaps", body) is refused
    quota = ApiError(403, "Forbidden", "exceeded quota: count/secrets=10")
    assert withhold_quoted_secrets(quota, "/api/v1/namespaces/a/secrets", body) is quota


def test_a_refusal_naming_the_tenant_of_the_pat_is_said_as_it_came() -> None:
    """A multi-tenant PAT carries its tenant before a dot: a namespace named after the
    tenant is in many refusals, which say nothing secret."""
    token = "onyx_pat_acme-corp.Zm9vYmFyYmF6cXV4cXV1eHF1dXo"
    body = {"data": {"ONYX_PAT": base64.b64encode(token.encode()).decode()}}
    path = "/api/v1/namespaces/acme-corp/secrets"
    terminating = ApiError(
        403,
        "Forbidden",
        "unable to create new content in namespace acme-corp because it is being terminated",
    )
    assert withhold_quoted_secrets(terminating, path, body) is terminating
    quoted = ApiError(403, "Forbidden", f"denied: ONYX_PAT={token}")
    assert withhold_quoted_secrets(quoted, path, body).message == SECRET_QUOTED
