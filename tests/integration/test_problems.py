"""Problems the schema cannot catch end in a condition, a reason and an event; never a hot loop."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from craft_operator.client.readiness import failure_of, progress_of
from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.credentials.errors import DatabaseUnavailableError
from craft_operator.credentials.keyring import generate_key_entry
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    UNBUILDABLE_RESOURCES,
    WIDGET_LIMIT,
    condition,
    event_posted,
    foreign_pod,
    phase,
    pod,
    sandbox,
    status,
)
from tests.integration.test_drift import ready_sandbox
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually, running_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running
from tests.support.policy import allow


async def passes_in(operator: OperatorContext, seconds: float) -> int:
    """How many reconcile passes run in ``seconds`` (a hot loop would run hundreds)."""
    before = operator.queue.processed + operator.queue.failed
    await asyncio.sleep(seconds)
    return operator.queue.processed + operator.queue.failed - before


async def test_no_server_url_anywhere_fails_the_sandbox_with_a_clear_reason(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    without_url = settings.model_copy(update={"server_url": None})
    async with running_operator(
        str(emulator.url).rstrip("/"), without_url, exec_transport=pod_exec
    ) as operator:
        emulator.create(SANDBOXES, sandbox("alice"))

        await phase(emulator, "alice", "Failed")
        ready = condition(emulator, "alice", "PodReady")
        assert ready["reason"] == "NoServerURL"
        assert "set spec.serverURL or the operator's CRAFT_SERVER_URL" in ready["message"]
        await event_posted(emulator, "alice", "NoServerURL")
        assert pod(emulator, "alice") is None
        assert await passes_in(operator, 1.0) <= 1

        allow(emulator, serverURLs=["https://onyx.example.com"])
        emulator.patch(
            SANDBOXES, NAMESPACE, "alice", {"spec": {"serverURL": "https://onyx.example.com"}}
        )
        await eventually(lambda: pod(emulator, "alice"), what="the pod once the URL is set")


async def test_resources_no_pod_can_have_fail_the_sandbox(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """A request above its limit is the CRD's to refuse; a device requested without a
    limit, which the settings could supply, is only known not to work at reconcile."""
    emulator.create(SANDBOXES, sandbox("alice", resources=UNBUILDABLE_RESOURCES))

    await phase(emulator, "alice", "Failed")
    said = condition(emulator, "alice", "PodReady")
    assert said["reason"] == "InvalidResources"
    assert said["message"].startswith("resources.limits.example.com/widget must be set")
    assert pod(emulator, "alice") is None


def credentials_database_down(operator: OperatorContext, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every credentials call fails as an unreachable database does."""

    async def unreachable(*_args: object, **_kwargs: object) -> None:
        raise DatabaseUnavailableError("the credentials database is unreachable")

    monkeypatch.setattr(operator.services.credentials, "ensure", unreachable)


async def test_a_failed_sandbox_stays_failed_while_the_database_is_down(
    emulator: KubeEmulator, operator: OperatorContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not Pending (new, to on-call) and not recovered: nothing judged its pod again."""
    emulator.create(
        SANDBOXES,
        sandbox("alice", resources=UNBUILDABLE_RESOURCES),
    )
    await phase(emulator, "alice", "Failed")
    credentials_database_down(operator, monkeypatch)

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"metadata": {"annotations": {"poke": "1"}}})

    await eventually(
        lambda: (
            condition(emulator, "alice", "CredentialsReady").get("reason") == "DatabaseUnavailable"
        ),
        what="the outage reported",
    )
    after = status(emulator, "alice")
    assert after["phase"] == "Failed"
    assert condition(emulator, "alice", "PodReady")["reason"] == "InvalidResources"
    assert "recoveredAt" not in after


async def test_a_failed_sandbox_whose_spec_is_fixed_during_an_outage_waits_instead(
    emulator: KubeEmulator, operator: OperatorContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backend's client must not read the fixed spec as failed while the database is
    down: its pod waits for the credentials."""
    emulator.create(
        SANDBOXES,
        sandbox("alice", resources=UNBUILDABLE_RESOURCES),
    )
    await phase(emulator, "alice", "Failed")
    credentials_database_down(operator, monkeypatch)

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"resources": WIDGET_LIMIT}})

    await phase(emulator, "alice", "Pending")
    assert condition(emulator, "alice", "PodReady")["status"] == "Unknown"


def reasons_said(operator: OperatorContext) -> list[str]:
    """The reasons of every event the operator posts from now on (folded repeats too)."""
    said: list[str] = []
    post = operator.services.events.post

    def counting(body: Any, *, type: str, reason: str, message: str) -> None:
        said.append(reason)
        post(body, type=type, reason=reason, message=message)

    operator.services.events.post = counting  # type: ignore[method-assign]
    return said


async def test_a_sandbox_failed_for_its_spec_says_so_once_not_on_every_resync(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    """Each resync posted the Warning again: its Event's count climbed for as long as the
    sandbox stayed Failed."""
    resyncing = settings.model_copy(update={"resync_interval": 0.3})
    async with running_operator(
        str(emulator.url).rstrip("/"), resyncing, exec_transport=pod_exec
    ) as operator:
        said = reasons_said(operator)
        emulator.create(SANDBOXES, sandbox("alice", resources=UNBUILDABLE_RESOURCES))
        await phase(emulator, "alice", "Failed")
        await passes_in(operator, 2.0)  # several resyncs of a sandbox that did not change

    assert said.count("InvalidResources") == 1


def refuse_alices_pod(resource: Any, obj: Any, old: Any) -> list[str]:
    """An admission policy that refuses the pod for what it is (422)."""
    if resource.plural == "pods" and old is None and obj["metadata"].get("name") == "alice":
        return ["spec.containers[0].image: Forbidden: denied by policy"]
    return []


@pytest.mark.admission_rejections
async def test_a_refused_pod_is_not_created_again_on_every_resync(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    """The same spec is refused the same way: one create through every webhook per resync
    for nothing (it is tried again after RETRY_REJECTED_AFTER)."""
    resyncing = settings.model_copy(update={"resync_interval": 0.3})
    emulator.validators.append(refuse_alices_pod)
    async with running_operator(
        str(emulator.url).rstrip("/"), resyncing, exec_transport=pod_exec
    ) as operator:
        said = reasons_said(operator)
        emulator.create(SANDBOXES, sandbox("alice"))
        await phase(emulator, "alice", "Failed")
        await passes_in(operator, 2.0)

    assert condition(emulator, "alice", "PodReady")["reason"] == "PodRejected"
    assert len(emulator.rejections) == 1
    assert said.count("PodRejected") == 1


async def test_a_policy_denial_lifted_during_an_outage_does_not_stay_failed(
    emulator: KubeEmulator, operator: OperatorContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The denial is the policy's verdict, not the pod's: allowed again (no spec change),
    the sandbox waits for the database, and the backend is not told it is refused."""
    emulator.create(SANDBOXES, sandbox("alice", image="registry.example.com/craft/sandbox:1.2"))
    await phase(emulator, "alice", "Failed")
    await event_posted(emulator, "alice", "PolicyDenied")
    credentials_database_down(operator, monkeypatch)

    allow(emulator, images=["registry.example.com/craft/"])

    await eventually(
        lambda: (
            condition(emulator, "alice", "CredentialsReady").get("reason") == "DatabaseUnavailable"
        ),
        what="the pass after the policy change",
    )
    assert condition(emulator, "alice", "PodReady")["reason"] != "PolicyDenied"
    assert status(emulator, "alice")["phase"] == "Pending"
    assert failure_of(progress_of(emulator.get(SANDBOXES, NAMESPACE, "alice"))) is None


async def test_a_spec_the_api_server_let_through_but_the_operator_cannot_read_is_said_once(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    """A CRD older than the operator's (or none of its rules): Failed, InvalidSpec, one
    Warning however many passes follow (the backend's touch() annotates it often)."""
    emulator.validators.clear()  # an API server that admits what the model refuses
    async with running_operator(
        str(emulator.url).rstrip("/"), settings, exec_transport=pod_exec
    ) as operator:
        said = reasons_said(operator)
        manifest = sandbox("alice")
        manifest["spec"]["user"]["id"] = "not-a-uuid"
        emulator.create(SANDBOXES, manifest)
        await phase(emulator, "alice", "Failed")
        for n in range(4):
            touch = {"metadata": {"annotations": {"craft.onyx.app/last-activity": f"n{n}"}}}
            emulator.patch(SANDBOXES, NAMESPACE, "alice", touch)
            await passes_in(operator, 0.3)

    assert condition(emulator, "alice", "PodReady")["reason"] == "InvalidSpec"
    assert said.count("InvalidSpec") == 1
    assert pod(emulator, "alice") is None


async def test_a_status_field_the_operator_cannot_read_leaves_a_ready_sandbox_ready(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """The CRD's date-time admits an offset of +24:00 (or the year 0000) that the model
    does not read: written by another operator version, or anyone with status access, it
    is removed by the next status patch; the sandbox is not Failed for it."""
    await ready_sandbox(emulator)
    unreadable = {"wokeAt": "2024-01-01T00:00:00+24:00"}

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"status": unreadable}, subresource="status")

    await eventually(lambda: "wokeAt" not in status(emulator, "alice"), what="wokeAt removed")
    assert status(emulator, "alice")["phase"] == "Ready"
    assert condition(emulator, "alice", "PodReady")["status"] == "True"


async def test_a_database_outage_keeps_the_sandbox_pending_and_is_retried_with_backoff(
    emulator: KubeEmulator, tmp_path: Path, pod_exec: EmulatedPodExec
) -> None:
    unreachable = Settings(
        state_dir=tmp_path / "state",
        server_url="http://onyx.invalid:8080",
        encryption_keys=generate_key_entry("test"),
        database_url="postgresql+psycopg://craft:secret-password@127.0.0.1:9/onyx",
        cluster_id="east",
        metrics_port=0,  # a fixed port would collide with another run (make run's 9090)
    )
    async with running_operator(
        str(emulator.url).rstrip("/"), unreachable, exec_transport=pod_exec
    ) as operator:
        emulator.create(SANDBOXES, sandbox("alice"))

        pending = await phase(emulator, "alice", "Pending", within=20)
        credentials = condition(emulator, "alice", "CredentialsReady")
        assert credentials["reason"] == "DatabaseUnavailable"
        assert "secret-password" not in str(pending)
        await event_posted(emulator, "alice", "DatabaseUnavailable")
        assert await passes_in(operator, 2.0) <= 3
        assert pod(emulator, "alice") is None


async def test_a_name_taken_by_someone_elses_pod_is_reported_and_left_alone(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    emulator.create("v1/pods", foreign_pod("alice", "nginx"))

    emulator.create(SANDBOXES, sandbox("alice"))

    ready = await eventually(
        lambda: (
            (c := condition(emulator, "alice", "PodReady")).get("reason") == "PodNameTaken" and c
        ),
        what="PodNameTaken",
    )
    assert "not managed by this CraftSandbox" in ready["message"]
    foreign = pod(emulator, "alice")
    assert foreign is not None
    assert foreign["spec"]["containers"][0]["image"] == "nginx"


async def test_an_unknown_source_renders_by_name_with_a_warning_event(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    emulator.create(SANDBOXES, sandbox("alice", sources=[{"name": "slack"}, {"name": "telepathy"}]))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    await phase(emulator, "alice", "Ready")

    skill = emulator.get("v1/configmaps", NAMESPACE, "alice-skills")["data"]["SKILL.md"]
    assert "`telepathy`" in skill
    await event_posted(emulator, "alice", "UnknownSource")
    assert status(emulator, "alice")["skill"]["sourceCount"] == 2


async def test_a_broken_custom_template_is_reported_and_the_built_in_one_keeps_it_ready(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    # A platform's broken template must not take every sandbox out of Ready: the built-in
    # one lists the user's sources meanwhile, and the condition and a Warning say why.
    emulator.create(
        "v1/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "skill-template", "namespace": "craft-system"},
            "data": {"SKILL.md.j2": "---\nname: company-search\n{{ undefined_thing.attr }}"},
        },
    )
    custom = settings.model_copy(update={"skill_template_configmap": "craft-system/skill-template"})
    async with running_operator(str(emulator.url).rstrip("/"), custom, exec_transport=pod_exec):
        emulator.create(SANDBOXES, sandbox("alice"))

        rendered = await eventually(
            lambda: (
                (c := condition(emulator, "alice", "SkillRendered")).get("reason")
                == "TemplateFallback"
                and c
            ),
            what="SkillRendered TemplateFallback",
        )
        assert rendered["status"] == "True"
        assert "'undefined_thing' is undefined" in rendered["message"]
        await event_posted(emulator, "alice", "SkillTemplateError")
        skill = emulator.get("v1/configmaps", NAMESPACE, "alice-skills")["data"]["SKILL.md"]
        assert skill.startswith("---\nname: company-search\n")  # the built-in rendering
        mark_pod_running(emulator, NAMESPACE, "alice")
        await phase(emulator, "alice", "Ready")


@pytest.mark.admission_rejections
async def test_the_emulated_api_server_rejects_an_invalid_sandbox_at_admission(
    emulator: KubeEmulator,
) -> None:
    manifest = sandbox("alice")
    manifest["spec"]["user"]["id"] = "not-a-uuid"
    server = str(emulator.url).rstrip("/")
    url = f"{server}/apis/craft.onyx.app/v1alpha1/namespaces/{NAMESPACE}/craftsandboxes"

    async with aiohttp.ClientSession() as session, session.post(url, json=manifest) as response:
        body = await response.json()

    assert response.status == 422
    assert "user.id must be an Onyx user UUID" in body["message"]
    assert emulator.find(SANDBOXES, NAMESPACE, "alice") is None
