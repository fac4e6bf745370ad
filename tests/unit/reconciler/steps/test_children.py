"""What the pod mounts: the credentials Secret, the skill ConfigMap, the library volume."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import aiohttp.web
import pytest
from kmock._internal import rendering

from craft_operator.api.models import CraftSandbox
from craft_operator.reconciler.run import Revisit
from craft_operator.reconciler.step import Pass, Stop
from craft_operator.reconciler.steps import credentials, library_volume, secret, skill
from craft_operator.skills.render import RenderedSkill
from tests.support.faults import failure_response
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import CANARY, NAME, World

pytestmark = pytest.mark.unit


async def with_pat(world: World, **body: object) -> Pass:
    p = world.pass_(**body)
    await credentials.ensure_pat(p)
    world.events.posted.clear()
    return p


async def test_the_secret_holds_the_pat_and_its_creation_is_said(world: World) -> None:
    p = await with_pat(world)
    assert await secret.converge_secret(p) is None
    stored = world.stored("v1/secrets", f"{NAME}-credentials")
    assert stored is not None
    assert CANARY in {base64.b64decode(value).decode() for value in stored["data"].values()}
    assert world.events.reasons == ["SecretCreated"]
    assert all(CANARY not in message for *_, message in world.events.posted)


async def test_a_secret_of_someone_else_by_that_name_is_left_alone(world: World) -> None:
    world.emulator.create(
        "v1/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{NAME}-credentials", "namespace": NAMESPACE},
        },
    )
    p = await with_pat(world)
    assert await secret.converge_secret(p) == Stop("WaitingForChildren")
    condition = p.run.condition("CredentialsReady")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "SecretNameTaken")
    assert p.run.verdict.backoff == "SecretNameTaken"
    assert "data" not in (world.stored("v1/secrets", f"{NAME}-credentials") or {})


def refusing_secrets(message: Callable[[dict[str, Any]], str]) -> Callable[..., Any]:
    """An admission webhook that refuses every Secret write with ``message(body)``."""

    async def refuse(request: rendering.Request) -> aiohttp.web.Response | None:
        if request.method.value.upper() in ("POST", "PATCH") and "/secrets" in request.url.path:
            return failure_response(403, "Forbidden", message(request.data or {}))
        return None

    return refuse


async def test_a_refusal_of_the_secret_that_quotes_its_data_is_said_without_it(
    world: World,
) -> None:
    """Gatekeeper's and Kyverno's messages often print the field they refused: the status
    is read by many more than may read Secrets, so the PAT must not ride on it."""
    world.emulator.before_request.append(
        refusing_secrets(
            lambda body: (
                'admission webhook "validation.gatekeeper.sh" denied the request: '
                f"Secret has data not allowed: {json.dumps(body.get('data'))}"
            )
        )
    )
    p = await with_pat(world)
    await secret.converge_secret(p)
    condition = p.run.condition("CredentialsReady")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "SecretWriteFailed")
    assert "withheld: it quoted the Secret's data" in condition.message
    forms = {CANARY, base64.b64encode(CANARY.encode()).decode()}
    said = [condition.message, *(message for *_, message in world.events.posted)]
    assert not [text for text in said for form in forms if form in text]


async def test_a_refusal_of_the_secret_that_quotes_none_of_it_is_said_as_it_came(
    world: World,
) -> None:
    quota = "exceeded quota: objects, requested: count/secrets=1, used: count/secrets=10"
    world.emulator.before_request.append(refusing_secrets(lambda body: quota))
    p = await with_pat(world)
    await secret.converge_secret(p)
    condition = p.run.condition("CredentialsReady")
    assert condition is not None
    assert quota in condition.message


async def test_the_skill_lists_the_sources_and_lands_in_its_configmap(world: World) -> None:
    p = world.pass_(spec={"sources": [{"name": "confluence"}, {"name": "github"}]})
    assert await skill.render_skill(p) is None
    condition = p.run.condition("SkillRendered")
    assert condition is not None
    assert condition.status == "True"
    assert "2 source(s)" in condition.message
    assert world.stored("v1/configmaps", f"{NAME}-skills") is not None
    assert p.run.status.skill is not None
    assert p.run.status.skill.source_count == 2


def break_the_template(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on the platform's template fails; the shipped one still renders."""
    from craft_operator.skills.template import SkillTemplateError

    real = world.services.skills.render

    async def broken(sandbox: CraftSandbox, *, builtin: bool = False) -> RenderedSkill:
        if builtin:
            return await real(sandbox, builtin=True)
        raise SkillTemplateError("the template does not parse")

    monkeypatch.setattr(world.services.skills, "render", broken)


async def test_a_broken_template_keeps_the_last_good_skill_of_the_same_sources(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = {"sources": [{"name": "github"}, {"name": "slack"}]}
    await skill.render_skill(world.pass_(spec=sources))
    before = world.stored("v1/configmaps", f"{NAME}-skills")
    break_the_template(world, monkeypatch)
    p = world.pass_(spec=sources)
    assert await skill.render_skill(p) is None, "a template error does not stop the pod"
    condition = p.run.condition("SkillRendered")
    assert condition is not None
    # The sandbox has a true SKILL.md: it stays Ready, the error said in the message.
    assert (condition.status, condition.reason) == ("True", "TemplateFallback")
    assert world.stored("v1/configmaps", f"{NAME}-skills") == before
    assert "SkillTemplateError" in world.events.reasons
    assert p.run.verdict.backoff == "TemplateFallback", "a fixed template is picked up soon"


async def test_a_broken_template_never_leaves_a_skill_listing_sources_the_user_lost(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    await skill.render_skill(world.pass_(spec={"sources": [{"name": "github"}, {"name": "slack"}]}))
    break_the_template(world, monkeypatch)
    p = world.pass_(spec={"sources": [{"name": "github"}]})
    assert await skill.render_skill(p) is None
    condition = p.run.condition("SkillRendered")
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "TemplateFallback")
    assert "the built-in template renders the 1 source(s)" in condition.message
    stored = world.stored("v1/configmaps", f"{NAME}-skills")
    assert stored is not None
    text = stored["data"]["SKILL.md"]
    assert "`github`" in text
    assert "`slack`" not in text, "the shipped template renders the current sources"


IN_ONE_ORDER = {"sources": [{"name": "slack"}, {"name": "jira"}]}
IN_ANOTHER = {"sources": [{"name": "jira"}, {"name": "slack"}, {"name": "jira"}]}


async def test_the_same_sources_in_another_order_leave_the_skills_configmap_unwritten(
    world: World,
) -> None:
    first = world.pass_(spec=IN_ONE_ORDER)
    assert await skill.render_skill(first) is None
    before = world.stored("v1/configmaps", f"{NAME}-skills")
    assert first.run.status.skill is not None
    status = {"skill": first.run.status.skill.model_dump(by_alias=True)}
    assert await skill.render_skill(world.pass_(spec=IN_ANOTHER, status=status)) is None
    assert world.stored("v1/configmaps", f"{NAME}-skills") == before


async def test_a_broken_template_keeps_the_last_good_skill_of_the_same_sources_reordered(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from craft_operator.skills.render import render_skill
    from craft_operator.skills.template import SkillTemplateError

    custom = "---\nname: company-search\ndescription: Custom.\n---\n{{ source_names }}\n"
    real = world.services.skills.render
    broken = False

    async def platform(sandbox: CraftSandbox, *, builtin: bool = False) -> RenderedSkill:
        if builtin:
            return await real(sandbox, builtin=True)
        if broken:
            raise SkillTemplateError("the template does not parse")
        return render_skill(sandbox.spec.sources, template=custom)

    monkeypatch.setattr(world.services.skills, "render", platform)
    first = world.pass_(spec=IN_ONE_ORDER)
    assert await skill.render_skill(first) is None
    kept = world.stored("v1/configmaps", f"{NAME}-skills")
    assert first.run.status.skill is not None
    status = {"skill": first.run.status.skill.model_dump(by_alias=True)}
    broken = True
    p = world.pass_(spec=IN_ANOTHER, status=status)
    assert await skill.render_skill(p) is None
    condition = p.run.condition("SkillRendered")
    assert condition is not None
    assert "lists the current sources" in condition.message
    assert world.stored("v1/configmaps", f"{NAME}-skills") == kept


async def test_exec_mode_needs_no_volume(world: World) -> None:
    p = world.pass_()
    assert await library_volume.converge_volume(p) is None
    assert world.stored("v1/persistentvolumeclaims", f"{NAME}-library") is None


async def test_job_mode_gets_its_library_volume(make_world: Callable[..., World]) -> None:
    world = make_world()
    p = world.pass_(spec={"userLibrary": {"mode": "Job"}})
    assert await library_volume.converge_volume(p) is None
    assert world.stored("v1/persistentvolumeclaims", f"{NAME}-library") is not None
    assert world.events.reasons == ["VolumeCreated"]
    assert p.run.verdict == Revisit()


async def test_a_library_volume_resize_on_a_stale_cache_never_lands_on_a_pvc_that_replaced_it(
    world: World,
) -> None:
    """Growing the library volume writes only to the PVC as read: someone else's made by
    its name since the cache last saw it is never grown (VolumeWriteFailed; read anew)."""
    pvcs, claim = "v1/persistentvolumeclaims", f"{NAME}-library"
    await library_volume.converge_volume(world.pass_(spec={"userLibrary": {"mode": "Job"}}))
    world.cache.put("PVC", world.emulator.get(pvcs, NAMESPACE, claim))
    world.emulator.remove(pvcs, NAMESPACE, claim)  # the watch has not delivered it yet
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    meta = {"name": claim, "namespace": NAMESPACE}
    foreign = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}
    other = world.emulator.create(pvcs, foreign)
    p = world.pass_(spec={"userLibrary": {"mode": "Job", "size": "50Gi"}})
    assert await library_volume.converge_volume(p) is None
    condition = p.run.condition("UserLibrarySynced")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "VolumeWriteFailed")
    assert world.stored(pvcs, claim) == other, "someone else's is left as it was"
    assert world.cache.get("PVC", NAMESPACE, claim) is None, "read anew on the next pass"
