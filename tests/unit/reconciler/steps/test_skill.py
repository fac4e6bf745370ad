"""SkillRendered over passes: a pass over an unchanged sandbox renders nothing, whatever the
fleet's size against the renderer's memo, and still renders again when the sources or the
platform's template change, or its ConfigMap was edited (counts of renderings)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from craft_operator.api.parse import parse_sandbox
from craft_operator.kube import kinds
from craft_operator.reconciler import skill_renderer
from craft_operator.reconciler.run import Run
from craft_operator.reconciler.skill_renderer import SkillRenderer
from craft_operator.reconciler.step import Memory, Pass
from craft_operator.reconciler.steps import skill
from craft_operator.reconciler.table import CONDITIONS
from craft_operator.skills.memo import RenderMemo
from craft_operator.skills.template import TEMPLATE_CONFIGMAP_KEY
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import NOW, World, sandbox_body

pytestmark = pytest.mark.unit

#: Renderings the renderer's memo holds in these tests: fewer than the fleet.
MEMO = 2
FLEET = 5
TEMPLATE = (
    "---\nname: company-search\ndescription: Custom company search.\n---\n"
    "{% for source in sources %}* {{ source.name }}\n{% endfor %}"
)


@pytest.fixture
def renderings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources digest of each rendering made, in order."""
    made: list[str] = []
    real = skill_renderer.render_skill

    def counting(*args: Any, **kwargs: Any) -> Any:
        rendered = real(*args, **kwargs)
        made.append(rendered.sources_hash)
        return rendered

    monkeypatch.setattr(skill_renderer, "render_skill", counting)
    return made


@pytest.fixture
def fleet_world(make_world: Callable[..., World], monkeypatch: pytest.MonkeyPatch) -> World:
    """The world with a renderer whose memo holds fewer renderings than the fleet has."""
    monkeypatch.setattr(
        skill_renderer, "RenderMemo", functools.partial(RenderMemo, max_entries=MEMO)
    )
    return make_world()


def pass_over(world: World, memory: Memory, name: str, sources: list[dict[str, Any]]) -> Pass:
    """A pass over sandbox ``name`` with ``sources``, with what earlier passes remembered."""
    body = sandbox_body(spec={"sources": sources})
    body["metadata"].update(name=name, uid=f"uid-{name}")
    return Pass(world.services, parse_sandbox(body), Run(body, NOW, CONDITIONS), memory)


def own_sources(index: int) -> list[dict[str, Any]]:
    """A user's connected sources with scopes of their own: a set no one else has."""
    return [{"name": "slack", "scopes": [f"#team-{index}"]}]


async def test_a_resync_of_a_fleet_larger_than_the_render_memo_renders_nothing(
    fleet_world: World, renderings: list[str]
) -> None:
    memory = Memory()
    for index in range(FLEET):  # the passes that made them Ready
        assert (
            await skill.render_skill(
                pass_over(fleet_world, memory, f"s{index}", own_sources(index))
            )
            is None
        )
    assert len(renderings) == FLEET
    renderings.clear()

    for index in range(FLEET):  # a resync, in the same order
        p = pass_over(fleet_world, memory, f"s{index}", own_sources(index))
        assert await skill.render_skill(p) is None
        condition = p.run.condition("SkillRendered")
        assert condition is not None
        assert (condition.reason, condition.message) == (
            "Rendered",
            "company-search skill lists 1 source(s)",
        )
        assert p.run.status.skill is not None

    assert renderings == []


async def test_a_sandbox_whose_sources_changed_renders_again(
    fleet_world: World, renderings: list[str]
) -> None:
    memory = Memory()
    await skill.render_skill(pass_over(fleet_world, memory, "alice", own_sources(1)))
    changed = pass_over(fleet_world, memory, "alice", own_sources(2))
    await skill.render_skill(changed)
    assert len(renderings) == 2
    stored = fleet_world.stored("v1/configmaps", "alice-skills")
    assert stored is not None
    assert "#team-2" in stored["data"]["SKILL.md"]


async def test_a_changed_template_renders_every_sandbox_again(
    make_world: Callable[..., World], renderings: list[str]
) -> None:
    world = make_world(skill_template_configmap="craft-system/skill-template")
    template = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "skill-template", "namespace": "craft-system"},
        "data": {TEMPLATE_CONFIGMAP_KEY: TEMPLATE},
    }
    world.emulator.create("v1/configmaps", template)
    # Read at every pass, not once per 30 s.
    world.services.skills = SkillRenderer(world.services.kube, world.services.settings, ttl=0)
    memory = Memory()
    await skill.render_skill(pass_over(world, memory, "alice", own_sources(1)))
    await skill.render_skill(pass_over(world, memory, "alice", own_sources(1)))
    assert len(renderings) == 1, "the same template: nothing rendered again"

    world.emulator.patch(
        "v1/configmaps",
        "craft-system",
        "skill-template",
        {"data": {TEMPLATE_CONFIGMAP_KEY: TEMPLATE.replace("* ", "- ")}},
    )
    p = pass_over(world, memory, "alice", own_sources(1))
    await skill.render_skill(p)

    assert len(renderings) == 2
    condition = p.run.condition("SkillRendered")
    assert condition is not None
    assert condition.reason == "Rendered"
    stored = world.stored("v1/configmaps", "alice-skills")
    assert stored is not None
    assert "- slack" in stored["data"]["SKILL.md"]


async def test_an_edited_skill_of_an_unchanged_sandbox_is_put_back(
    fleet_world: World, renderings: list[str]
) -> None:
    memory = Memory()
    await skill.render_skill(pass_over(fleet_world, memory, "alice", own_sources(1)))
    written = fleet_world.stored("v1/configmaps", "alice-skills")
    assert written is not None
    edited = fleet_world.emulator.patch(
        "v1/configmaps", NAMESPACE, "alice-skills", {"data": {"SKILL.md": "edited"}}
    )
    fleet_world.cache.put(kinds.CONFIGMAP.name, edited)

    await skill.render_skill(pass_over(fleet_world, memory, "alice", own_sources(1)))

    stored = fleet_world.stored("v1/configmaps", "alice-skills")
    assert stored is not None
    assert stored["data"]["SKILL.md"] == written["data"]["SKILL.md"]


async def test_what_a_sandbox_s_skill_holds_is_forgotten_with_the_sandbox(
    fleet_world: World,
) -> None:
    memory = Memory()
    p = pass_over(fleet_world, memory, "alice", own_sources(1))
    await skill.render_skill(p)
    assert list(memory.skills) == [p.run.key]
    memory.forget(p.run.key)
    assert memory.skills == {}


async def test_an_unknown_source_is_warned_about_once_not_at_every_pass(world: World) -> None:
    """The warning says what a rendering lists by name: a resync renders nothing new, so
    it says nothing, or every sandbox with such a source would post one per resync."""
    sources = [{"name": "acme_wiki"}, {"name": "slack"}]
    memory = Memory()
    first = world.pass_(spec={"sources": sources}, memory=memory)
    assert await skill.render_skill(first) is None
    assert first.run.status.skill is not None
    status = {"skill": first.run.status.skill.model_dump(by_alias=True)}

    for _ in range(3):  # resyncs of the unchanged sandbox
        again = world.pass_(spec={"sources": sources}, status=status, memory=memory)
        assert await skill.render_skill(again) is None

    assert world.events.reasons.count("UnknownSource") == 1
