"""The orphan sweep in the running operator: a PAT no CraftSandbox owns is revoked.

The operator runs against the emulator with a short sweep interval. A credential row left
by a sandbox that no longer exists (as after a finalizer removed by hand) loses its PAT;
a live sandbox's PAT, and the rows another cluster's operator wrote in the same database
(one of them for its own sandbox of the same name), stay live. Each start sweeps once its
cache is filled, so that an operator restarted more often than the interval still sweeps.
"""

from __future__ import annotations

import uuid

from craft_operator.config import Settings
from craft_operator.credentials import SandboxIdentity, build_credential_store
from craft_operator.credentials.store import PatState
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import NAMESPACE, phase, pod, sandbox
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually, running_operator, start_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running


def plant_row(settings: Settings, name: str, *, cluster_id: str | None = None) -> int:
    """A credential row (and live PAT) for a sandbox ``name`` that does not exist."""
    if cluster_id is not None:
        settings = settings.model_copy(update={"cluster_id": cluster_id})
    store = build_credential_store(settings)
    try:
        identity = SandboxIdentity(NAMESPACE, name, str(uuid.uuid4()))
        return store.ensure(identity, user_id=uuid.uuid4(), tenant_id="public").pat_id
    finally:
        store.close()


def pat_state(settings: Settings, name: str, *, cluster_id: str | None = None) -> PatState | None:
    """The state of the PAT stored for sandbox ``name`` (by this cluster, or by
    ``cluster_id``); ``None`` if no row is left."""
    if cluster_id is not None:
        settings = settings.model_copy(update={"cluster_id": cluster_id})
    store = build_credential_store(settings)
    try:
        info = store.show(NAMESPACE, name)
    finally:
        store.close()
    return None if info is None else info.pat_state


def show(settings: Settings, name: str, *, cluster_id: str) -> int | None:
    """The PAT id ``cluster_id`` stores for sandbox ``name``."""
    store = build_credential_store(settings.model_copy(update={"cluster_id": cluster_id}))
    try:
        info = store.show(NAMESPACE, name)
    finally:
        store.close()
    return None if info is None else info.pat_id


async def test_the_sweep_revokes_only_this_cluster_s_pats_without_a_sandbox(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    sweeping = settings.model_copy(update={"orphan_sweep_interval": 0.2})
    plant_row(sweeping, "deleted-while-the-operator-was-down")
    plant_row(sweeping, "other-cluster-s", cluster_id="west")
    west_alice = plant_row(sweeping, "alice", cluster_id="west")

    async with running_operator(str(emulator.url).rstrip("/"), sweeping, exec_transport=pod_exec):
        emulator.create(SANDBOXES, sandbox("alice"))
        await eventually(lambda: pod(emulator, "alice"), what="the pod")
        mark_pod_running(emulator, NAMESPACE, "alice")
        await phase(emulator, "alice", "Ready")
        await eventually(
            lambda: pat_state(sweeping, "deleted-while-the-operator-was-down") is None,
            what="the orphan's row removed",
        )

        assert pat_state(sweeping, "alice") is PatState.LIVE
        assert pat_state(sweeping, "other-cluster-s", cluster_id="west") is PatState.LIVE
        assert pat_state(sweeping, "alice", cluster_id="west") is PatState.LIVE
        assert show(sweeping, "alice", cluster_id="west") == west_alice


async def test_an_operator_restarted_more_often_than_the_interval_sweeps_at_each_start(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    sweeping = settings.model_copy(update={"orphan_sweep_interval": 600.0})
    url = str(emulator.url).rstrip("/")
    for life in range(2):  # each killed long before an interval is up (OOM, eviction)
        name = f"deleted-before-start-{life}"
        plant_row(sweeping, name)
        running = await start_operator(url, sweeping, exec_transport=pod_exec)
        try:
            await eventually(
                lambda name=name: pat_state(sweeping, name) is None,
                what=f"the orphan's row removed in life {life}",
            )
        finally:
            await running.kill()
