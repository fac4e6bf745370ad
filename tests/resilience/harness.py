"""The resilience suite's harness: the operator as a real process, a kubelet, and the checks.

The operator runs exactly as in production, ``craft-operator run``, in its own process, so
a crash is a real ``SIGKILL`` (nothing in flight finishes, no ``finally`` runs) and its
logs, metrics and exceptions are its own. It talks to the emulator in the test's process
over HTTP, execs into pods through the emulator's exec API, and uses a real database and
moto's S3 server.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from craft_operator.builders.naming import SECRET_SUFFIX
from craft_operator.credentials.tables import PersonalAccessToken
from craft_operator.credentials.tokens import hash_token
from tests.support.credentials_db import live_pats_and_rows
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.operator_process import OperatorProcess
from tests.support.pod_exec import mark_pod_running

CRAFT = "craft.onyx.app/v1alpha1/craftsandboxes"


async def kubelet(emulator: KubeEmulator, namespace: str, *, interval: float = 0.05) -> None:
    """Play the kubelet until cancelled: every new pod starts running and becomes Ready."""
    while True:
        for pod in emulator.list("v1/pods", namespace):
            meta = pod["metadata"]
            if not (pod.get("status") or {}).get("phase") and not meta.get("deletionTimestamp"):
                with contextlib.suppress(KeyError):
                    mark_pod_running(emulator, namespace, meta["name"])
        await asyncio.sleep(interval)


# -- the guarantees -------------------------------------------------------------------------


def check_converged(
    emulator: KubeEmulator, database_url: str, namespace: str, expected: Iterable[str]
) -> None:
    """Every expected sandbox Ready with exactly one of each child and one live PAT; no more.

    Raises ``AssertionError`` naming what is wrong.
    """
    expected = sorted(expected)
    sandboxes = {s["metadata"]["name"]: s for s in emulator.list(CRAFT, namespace)}
    assert sorted(sandboxes) == expected, "sandboxes left over or missing"
    not_ready = {
        name: (s.get("status") or {}).get("phase")
        for name, s in sandboxes.items()
        if (s.get("status") or {}).get("phase") != "Ready"
    }
    assert not not_ready, f"not Ready: {not_ready}"
    children = {
        "v1/pods": "",
        "v1/secrets": SECRET_SUFFIX,
        "v1/configmaps": "-skills",
    }
    for resource, suffix in children.items():
        names = sorted(o["metadata"]["name"] for o in emulator.list(resource, namespace))
        assert names == sorted(name + suffix for name in expected), f"{resource}: {names}"
        for obj in emulator.list(resource, namespace):
            owners = obj["metadata"].get("ownerReferences") or []
            uid = sandboxes[obj["metadata"]["name"].removesuffix(suffix)]["metadata"]["uid"]
            assert [o["uid"] for o in owners] == [uid], f"{obj['metadata']['name']}: {owners}"

    live_by_id, rows = live_pats_and_rows(database_url, namespace)
    by_name = {row.name: row for row in rows}
    assert len(by_name) == len(rows), "two credential rows for one sandbox"
    assert sorted(by_name) == expected, f"credential rows: {sorted(by_name)}"
    assert sorted(live_by_id) == sorted(row.pat_id for row in rows), (
        f"{len(live_by_id)} live PATs for {len(rows)} sandboxes (orphans or missing)"
    )
    for name, row in by_name.items():
        assert row.sandbox_uid == sandboxes[name]["metadata"]["uid"], f"{name}: stale uid"
        secret = emulator.get("v1/secrets", namespace, name + SECRET_SUFFIX)
        token = base64.b64decode(secret["data"]["ONYX_PAT"]).decode()
        assert hash_token(token) == live_by_id[row.pat_id], f"{name}: Secret holds a dead PAT"


async def until_converged(
    operator: OperatorProcess,
    emulator: KubeEmulator,
    database_url: str,
    namespace: str,
    expected: Iterable[str],
    *,
    within: float,
) -> None:
    """Wait for :func:`check_converged` to pass; fail with what is still wrong and the log."""
    expected = list(expected)
    try:
        await eventually(
            lambda: check_converged(emulator, database_url, namespace, expected) is None,
            within=within,
            interval=0.5,
            what="convergence",
        )
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\noperator alive: {operator.alive}; its log ends:\n{operator.log_tail()}"
        ) from None


def sandbox_manifest(name: str, namespace: str, user_id: str, **spec: Any) -> dict[str, Any]:
    """A CraftSandbox for ``user_id``."""
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"user": {"id": user_id}, **spec},
    }


def pats_minted_per_sandbox(database_url: str) -> dict[str, int]:
    """How many PATs were ever minted for each sandbox (revoked ones included), by PAT name."""
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                sa.select(PersonalAccessToken.name, sa.func.count()).group_by(
                    PersonalAccessToken.name
                )
            ).all()
    finally:
        engine.dispose()
    return {str(name): int(count) for name, count in rows}
