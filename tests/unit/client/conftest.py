"""Fixtures for the backend client against the KMock emulator.

The emulator admits CraftSandboxes with the CRD's schema, defaults and CEL rules, serves
server-side apply (``tests.support.apply``) and records the field managers that applied.
No operator runs: a test plays it by writing the status the operator would write
(:func:`write_status`), which makes every transition the client sees deliberate.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import aiohttp.web
import kmock
import pytest
from kmock._internal import rendering

from craft_operator.api import crd, models
from craft_operator.client import AsyncSandboxClient, Connection, RetryPolicy, SandboxClient
from tests.support.admission import admit, default_craftsandbox
from tests.support.apply import server_side_apply
from tests.support.emulator import KubeEmulator, declare_core_resources

SANDBOXES = kmock.resource(models.GROUP, models.VERSION, models.PLURAL)
NAMESPACE = "craft"
USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"
#: Quick retries: the tests count them, they do not wait for them.
FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)


def declare_sandboxes(emulator: KubeEmulator) -> None:
    """Serve CraftSandboxes as the generated CRD defines them."""
    names = crd.build_crd()["spec"]["names"]
    emulator.declare(
        SANDBOXES,
        kmock.ResourceInfo(
            kind=names["kind"],
            singular=names["singular"],
            namespaced=True,
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
            subresources={"status"},
        ),
    )


@pytest.fixture
def managers() -> list[str]:
    """The field manager of every apply the emulator served."""
    return []


@pytest.fixture
async def emulator(managers: list[str]) -> AsyncIterator[KubeEmulator]:
    """The emulator with CraftSandboxes, admission and server-side apply."""
    async with KubeEmulator() as handler, kmock.Server(handler):
        declare_core_resources(handler)
        declare_sandboxes(handler)
        handler.mutators.append(default_craftsandbox)
        handler.validators.append(admit)
        handler.before_request.append(server_side_apply(handler, managers))
        yield handler
    assert handler.rejections == [], "the API server would have refused these writes"


@pytest.fixture
def connection(emulator: KubeEmulator) -> Connection:
    """A connection to the emulator (plain HTTP, no credentials)."""
    return Connection(server=str(emulator.url).rstrip("/"), insecure=True, source="emulator")


@pytest.fixture
async def aclient(connection: Connection) -> AsyncIterator[AsyncSandboxClient]:
    """The asyncio client."""
    async with AsyncSandboxClient(connection, retry=FAST) as client:
        yield client


@pytest.fixture
def client(connection: Connection) -> Iterator[SandboxClient]:
    """The synchronous client; call it through ``asyncio.to_thread`` so the emulator, on
    the test's loop, keeps serving while it blocks."""
    with SandboxClient(connection, retry=FAST) as sync_client:
        yield sync_client


def write_status(
    emulator: KubeEmulator,
    name: str,
    phase: str,
    conditions: Mapping[str, tuple[str, str]] | None = None,
    *,
    generation: int | None = None,
    **extra: Any,
) -> None:
    """Write the status the operator would: ``conditions`` maps a type to (status, reason);
    ``observedGeneration`` is the object's generation unless given."""
    current = emulator.get(SANDBOXES, NAMESPACE, name)["metadata"]["generation"]
    observed = current if generation is None else generation
    status: dict[str, Any] = {
        "phase": phase,
        "observedGeneration": observed,
        "conditions": [
            {"type": kind, "status": state, "reason": reason, "message": f"{kind} is {reason}"}
            for kind, (state, reason) in (conditions or {}).items()
        ],
        **extra,
    }
    emulator.patch(SANDBOXES, NAMESPACE, name, {"status": status}, subresource="status")


REQUIRED = ("CredentialsReady", "SkillRendered", "PodReady", "CLIValidated", "UserLibrarySynced")


def all_true(**overrides: tuple[str, str]) -> dict[str, tuple[str, str]]:
    """Every condition Ready requires True, then Ready itself, with ``overrides``."""
    conditions = {kind: ("True", "Done") for kind in REQUIRED}
    conditions["Ready"] = ("True", "SandboxReady")
    conditions.update(overrides)
    return conditions


async def crd_not_served(request: rendering.Request) -> aiohttp.web.StreamResponse:
    """An emulator hook answering as a real API server does for a resource it does not
    serve (the CRD is not installed): a 404 whose Status names no object."""
    body = {
        "kind": "Status",
        "status": "Failure",
        "message": "the server could not find the requested resource",
        "reason": "NotFound",
        "details": {},
        "code": 404,
    }
    return aiohttp.web.json_response(body, status=404)
