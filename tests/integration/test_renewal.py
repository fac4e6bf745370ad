"""A renewed PAT reaches the running pod without replacing it, and the one it superseded
lives no longer than it must: until onyx-cli accepts the new one, at most its grace period.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp.web
import sqlalchemy as sa

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    event_posted,
    live_pats,
    phase,
    pod,
    sandbox,
    status,
    token_in_secret,
)
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running


async def ready_sandbox(emulator: KubeEmulator) -> tuple[int, str, str]:
    """Alice, Ready: her PAT's id, her token and her pod's uid."""
    emulator.create(SANDBOXES, sandbox("alice", credentials={"lifetime": "1h"}))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    await phase(emulator, "alice", "Ready")
    created = pod(emulator, "alice")
    assert created is not None
    pat = status(emulator, "alice")["credentials"]["patId"]
    return pat, token_in_secret(emulator, "alice"), created["metadata"]["uid"]


def due_for_renewal(
    settings: Settings, operator: OperatorContext, pat: int, uid: str, name: str = "alice"
) -> None:
    """Move sandbox ``name``'s PAT into its renewal window, as time would, and have the
    operator look."""
    engine = sa.create_engine(settings.database_url_value)
    soon = datetime.now(UTC) + timedelta(minutes=10)  # inside 20 % of 1h; past the grace
    with engine.begin() as connection:
        connection.execute(
            sa.text("UPDATE personal_access_token SET expires_at = :soon WHERE id = :id"),
            {"soon": soon.replace(tzinfo=None), "id": pat},
        )
    engine.dispose()
    operator.services.credentials.forget(uid)  # type: ignore[attr-defined]
    operator.queue.add((NAMESPACE, name))


def expires_at(settings: Settings, pat: int) -> datetime:
    engine = sa.create_engine(settings.database_url_value)
    with engine.connect() as connection:
        value = connection.execute(
            sa.text("SELECT expires_at FROM personal_access_token WHERE id = :id"), {"id": pat}
        ).scalar_one()
    engine.dispose()
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


async def test_a_renewed_pat_is_delivered_into_the_same_pod_and_the_old_one_revoked(
    emulator: KubeEmulator,
    operator: OperatorContext,
    settings: Settings,
    pod_exec: EmulatedPodExec,
) -> None:
    first, first_token, pod_uid = await ready_sandbox(emulator)
    uid = emulator.get(SANDBOXES, NAMESPACE, "alice")["metadata"]["uid"]

    due_for_renewal(settings, operator, first, uid)

    await eventually(
        lambda: status(emulator, "alice").get("validatedPatID") not in (None, first),
        what="the renewed PAT validated in the pod",
    )
    renewed = status(emulator, "alice")["validatedPatID"]
    still = pod(emulator, "alice")
    assert still is not None
    assert still["metadata"]["uid"] == pod_uid, "the pod was not replaced"
    delivered = pod_exec.local.credentials_dir(NAMESPACE, "alice") / "pat"
    assert delivered.read_text() == token_in_secret(emulator, "alice") != first_token
    assert live_pats(settings) == [renewed], "the superseded PAT is revoked once validated"
    await event_posted(emulator, "alice", "PATRetired")


async def test_a_renewed_pat_the_pod_never_validates_leaves_the_old_one_its_grace_only(
    emulator: KubeEmulator,
    operator: OperatorContext,
    settings: Settings,
    cli_exit_codes: dict[str, int],
) -> None:
    first, _, pod_uid = await ready_sandbox(emulator)
    uid = emulator.get(SANDBOXES, NAMESPACE, "alice")["metadata"]["uid"]
    cli_exit_codes[f"{NAMESPACE}/alice"] = 5  # the Onyx server is unreachable from now on

    renewed_at = datetime.now(UTC)
    due_for_renewal(settings, operator, first, uid)

    await eventually(lambda: len(live_pats(settings)) == 2, what="the renewed PAT")
    await eventually(
        lambda: status(emulator, "alice").get("credentials", {}).get("patId") != first,
        what="the renewal in the status",
    )
    grace = timedelta(seconds=settings.credential_renewal_grace)
    assert expires_at(settings, first) <= renewed_at + grace + timedelta(seconds=5)
    still = pod(emulator, "alice")
    assert still is not None
    assert still["metadata"]["uid"] == pod_uid


async def test_a_renewed_pat_reaches_the_pod_while_the_secret_cannot_be_written(
    emulator: KubeEmulator,
    operator: OperatorContext,
    settings: Settings,
    pod_exec: EmulatedPodExec,
) -> None:
    first, first_token, pod_uid = await ready_sandbox(emulator)
    uid = emulator.get(SANDBOXES, NAMESPACE, "alice")["metadata"]["uid"]

    async def refuse_secret_writes(request: Any) -> aiohttp.web.StreamResponse | None:
        if "/secrets" in request.url.path and request.method.value.upper() != "GET":
            status = {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd"}
            return aiohttp.web.json_response(status, status=500)
        return None

    emulator.before_request.insert(0, refuse_secret_writes)
    due_for_renewal(settings, operator, first, uid)

    await eventually(
        lambda: status(emulator, "alice").get("validatedPatID") not in (None, first),
        what="the renewed PAT validated in the pod, the Secret refused",
    )
    delivered = pod_exec.local.credentials_dir(NAMESPACE, "alice") / "pat"
    assert delivered.read_text() != first_token
    assert token_in_secret(emulator, "alice") == first_token, "the Secret write was refused"
    assert live_pats(settings) == [status(emulator, "alice")["validatedPatID"]]
    still = pod(emulator, "alice")
    assert still is not None
    assert still["metadata"]["uid"] == pod_uid
