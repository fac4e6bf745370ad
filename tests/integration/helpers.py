"""Small helpers the integration tests share: manifests, status reads, PAT counts."""

from __future__ import annotations

import base64
from typing import Any

import aiohttp.web
import sqlalchemy as sa
from kmock._internal import rendering

from craft_operator.config import Settings
from tests.integration.conftest import SANDBOXES
from tests.support.emulator import KubeEmulator
from tests.support.events import step_reasons
from tests.support.operator import eventually

NAMESPACE = "team-a"
USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"


#: Resources the CRD admits but no pod can have: a device Kubernetes never overcommits,
#: requested without a limit (the pod API refuses it; the operator says so first). Setting
#: the limit too (``WIDGET_LIMIT``) fixes it.
UNBUILDABLE_RESOURCES = {"requests": {"example.com/widget": "1"}}
WIDGET_LIMIT = {"limits": {"example.com/widget": "1"}}


def sandbox(name: str, **spec: Any) -> dict[str, Any]:
    """A CraftSandbox manifest in the test namespace."""
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"user": {"id": USER_ID}, **spec},
    }


def foreign_pod(name: str, image: str, **metadata: Any) -> dict[str, Any]:
    """Someone else's pod, compliant with Pod Security ``restricted``, in the test namespace."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, **metadata},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "app",
                    "image": image,
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def status(emulator: KubeEmulator, name: str) -> dict[str, Any]:
    """The sandbox's status (empty if none yet)."""
    return dict(emulator.get(SANDBOXES, NAMESPACE, name).get("status") or {})


def condition(emulator: KubeEmulator, name: str, type_: str) -> dict[str, Any]:
    """One condition of the sandbox (empty if absent)."""
    for item in status(emulator, name).get("conditions", []):
        if item["type"] == type_:
            return dict(item)
    return {}


async def phase(emulator: KubeEmulator, name: str, expected: str, *, within: float = 10) -> dict:
    """Wait until the sandbox reaches ``expected`` phase; return its status."""
    return await eventually(
        lambda: (found := status(emulator, name)).get("phase") == expected and found,
        within=within,
        what=f"phase {expected} of {name}",
    )


def pod(emulator: KubeEmulator, name: str) -> dict[str, Any] | None:
    """The sandbox's pod, if it exists (being deleted, too)."""
    return emulator.find("v1/pods", NAMESPACE, name)


def pod_of(emulator: KubeEmulator, name: str, owner: dict[str, Any]) -> dict[str, Any] | None:
    """The pod ``name`` if ``owner`` (a sandbox as created) owns it: not the one, being
    deleted, of a sandbox of that name deleted just before."""
    found = pod(emulator, name)
    refs = (found or {}).get("metadata", {}).get("ownerReferences") or []
    return found if any(ref.get("uid") == owner["metadata"]["uid"] for ref in refs) else None


async def pod_gone(emulator: KubeEmulator, name: str) -> None:
    """Wait until the pod ``name`` is gone: a running pod the operator deleted stays, being
    deleted, until the emulated kubelet has stopped it (``emulator.kubelet_delay``)."""
    await eventually(lambda: pod(emulator, name) is None, what=f"pod {name} gone")


async def new_pod(emulator: KubeEmulator, name: str, *, than: dict[str, Any]) -> dict[str, Any]:
    """Wait for a pod ``name`` other than ``than`` (which may still be being deleted)."""
    old = than["metadata"]["uid"]
    return dict(
        await eventually(
            lambda: (found := pod(emulator, name)) and found["metadata"]["uid"] != old and found,
            what=f"a new pod {name}",
        )
    )


def token_in_secret(emulator: KubeEmulator, name: str) -> str:
    """The PAT the operator put in the sandbox's Secret."""
    secret = emulator.get("v1/secrets", NAMESPACE, f"{name}-credentials")
    return base64.b64decode(secret["data"]["ONYX_PAT"]).decode()


def events_about(emulator: KubeEmulator, name: str) -> list[dict[str, Any]]:
    """The events posted about the sandbox, oldest first."""
    events = emulator.list("v1/events", NAMESPACE)
    return [e for e in events if e["involvedObject"].get("name") == name]


def event_reasons(emulator: KubeEmulator, name: str) -> list[str]:
    """Reasons of the steps the events about the sandbox said, oldest first (a pass's
    Normal events come as one event; each of its steps is listed)."""
    return step_reasons(events_about(emulator, name))


def live_pats(settings: Settings) -> list[int]:
    """Ids of PATs in the database that are not revoked."""
    engine = sa.create_engine(settings.database_url_value)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                sa.text("SELECT id FROM personal_access_token WHERE is_revoked = 0 ORDER BY id")
            )
            return [row[0] for row in rows]
    finally:
        engine.dispose()


async def event_posted(emulator: KubeEmulator, name: str, reason: str) -> list[str]:
    """Wait until an event with ``reason`` about the sandbox is posted; all reasons so far."""
    return await eventually(
        lambda: reason in (found := event_reasons(emulator, name)) and found,
        what=f"a {reason} event about {name}",
    )


async def refuse_pod_deletion(request: rendering.Request) -> aiohttp.web.Response | None:
    """A before-request hook of the emulator: every pod deletion is refused with 403, as an
    admission webhook would (its message carries words a test checks are never repeated)."""
    if request.method.value.upper() == "DELETE" and "/pods/" in request.url.path:
        refusal = {
            "kind": "Status",
            "code": 403,
            "reason": "Forbidden",
            "message": 'admission webhook "deny.example" denied the request: canary-words',
        }
        return aiohttp.web.json_response(refusal, status=403)
    return None
