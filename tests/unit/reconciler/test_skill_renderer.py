"""Specification of the reconciler's SKILL.md renderer: the built-in template without an
API call, the platform's template from its ConfigMap (emulator), renderings and failures
remembered, and a custom template kept off the event loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import kopf
import pytest

from craft_operator.config import Settings
from craft_operator.kube.client import ApiError, KubeClient
from craft_operator.reconciler import skill_renderer
from craft_operator.reconciler.skill_renderer import SkillRenderer
from craft_operator.skills.render import RenderedSkill, render_skill
from craft_operator.skills.template import TEMPLATE_CONFIGMAP_KEY, SkillTemplateError
from tests.support.emulator import KubeEmulator
from tests.unit.reconciler.parsed import make_sandbox

TEMPLATE = (
    "---\nname: company-search\ndescription: Custom company search.\n---\n"
    "{% for source in sources %}* {{ source.name }}\n{% endfor %}"
)


def template_configmap(text: str = TEMPLATE) -> dict[str, Any]:
    """The platform team's template ConfigMap."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "skill-template", "namespace": "craft-system"},
        "data": {TEMPLATE_CONFIGMAP_KEY: text},
    }


def configmap_reads(emulator: KubeEmulator) -> int:
    """GET requests for the template ConfigMap."""
    return sum(
        1
        for request in emulator.served
        if request.method.value.upper() == "GET" and request.url.path.endswith("/skill-template")
    )


@pytest.fixture
def custom_settings(tmp_path: Path) -> Settings:
    """Settings naming a custom template ConfigMap."""
    return Settings(state_dir=tmp_path, skill_template_configmap="craft-system/skill-template")


SOURCES: list[dict[str, Any]] = [{"name": "slack", "scopes": ["#general"]}, {"name": "confluence"}]


async def test_the_builtin_template_renders_without_any_api_call(
    kube: KubeClient, emulator: KubeEmulator, tmp_path: Path
) -> None:
    renderer = SkillRenderer(kube, Settings(state_dir=tmp_path))
    rendered = await renderer.render(make_sandbox(sources=SOURCES))
    assert rendered.text.startswith("---\nname: company-search\n")
    assert rendered.source_count == 2
    assert emulator.served == []


async def test_the_same_sources_give_the_memoised_rendering(
    kube: KubeClient, tmp_path: Path
) -> None:
    renderer = SkillRenderer(kube, Settings(state_dir=tmp_path))
    first = await renderer.render(make_sandbox("a", "uid-a", sources=SOURCES))
    second = await renderer.render(make_sandbox("b", "uid-b", sources=SOURCES))
    assert second is first
    other = await renderer.render(make_sandbox(sources=[{"name": "jira"}]))
    assert other.content_hash != first.content_hash


async def test_a_custom_template_is_read_from_its_configmap_once_per_ttl(
    kube: KubeClient, emulator: KubeEmulator, custom_settings: Settings
) -> None:
    emulator.create("v1/configmaps", template_configmap())
    renderer = SkillRenderer(kube, custom_settings, ttl=3600)
    for uid in ["a", "b", "c"]:
        rendered = await renderer.render(make_sandbox(uid, uid, sources=SOURCES))
        assert "* slack\n" in rendered.text
        assert "* confluence\n" in rendered.text
        assert "Custom company search." in rendered.text
    assert configmap_reads(emulator) == 1


async def test_a_custom_template_is_read_again_after_its_ttl(
    kube: KubeClient, emulator: KubeEmulator, custom_settings: Settings
) -> None:
    emulator.create("v1/configmaps", template_configmap())
    renderer = SkillRenderer(kube, custom_settings, ttl=0)
    await renderer.render(make_sandbox(sources=SOURCES))
    emulator.patch(
        "v1/configmaps",
        "craft-system",
        "skill-template",
        {"data": {TEMPLATE_CONFIGMAP_KEY: TEMPLATE.replace("Custom", "Revised")}},
    )
    rendered = await renderer.render(make_sandbox(sources=SOURCES))
    assert configmap_reads(emulator) == 2
    assert "Revised company search." in rendered.text


async def test_the_inputs_are_what_a_rendering_records_it_was_made_from(
    kube: KubeClient, emulator: KubeEmulator, tmp_path: Path, custom_settings: Settings
) -> None:
    """The skill step holds a ConfigMap's SKILL.md current while these stay the same."""
    emulator.create("v1/configmaps", template_configmap())
    sandbox = make_sandbox(sources=SOURCES)
    for renderer in (
        SkillRenderer(kube, Settings(state_dir=tmp_path)),
        SkillRenderer(kube, custom_settings),
    ):
        rendered = await renderer.render(sandbox)
        assert await renderer.inputs(sandbox) == (rendered.sources_hash, rendered.template_hash)
    assert rendered.template_hash is not None, "a custom template's digest is part of them"


async def test_concurrent_renders_read_the_template_once(
    kube: KubeClient, emulator: KubeEmulator, custom_settings: Settings
) -> None:
    emulator.create("v1/configmaps", template_configmap())
    renderer = SkillRenderer(kube, custom_settings, ttl=3600)
    await asyncio.gather(
        *(renderer.render(make_sandbox(str(i), str(i), sources=SOURCES)) for i in range(5))
    )
    assert configmap_reads(emulator) == 1


async def test_builtin_skips_the_custom_template(
    kube: KubeClient, emulator: KubeEmulator, custom_settings: Settings
) -> None:
    renderer = SkillRenderer(kube, custom_settings)
    rendered = await renderer.render(make_sandbox(sources=SOURCES), builtin=True)
    assert "Custom company search." not in rendered.text
    assert emulator.served == []


async def test_a_missing_template_configmap_is_a_skill_template_error_naming_it(
    kube: KubeClient, custom_settings: Settings
) -> None:
    renderer = SkillRenderer(kube, custom_settings)
    with pytest.raises(SkillTemplateError, match="craft-system/skill-template does not exist"):
        await renderer.render(make_sandbox())


async def test_a_template_configmap_without_the_key_is_a_skill_template_error(
    kube: KubeClient, emulator: KubeEmulator, custom_settings: Settings
) -> None:
    emulator.create("v1/configmaps", {**template_configmap(), "data": {"other": "x"}})
    renderer = SkillRenderer(kube, custom_settings)
    with pytest.raises(SkillTemplateError, match=f"has no key {TEMPLATE_CONFIGMAP_KEY}"):
        await renderer.render(make_sandbox())


async def test_an_unreadable_template_configmap_is_a_skill_template_error(
    emulator: KubeEmulator, custom_settings: Settings
) -> None:
    client = KubeClient(request_timeout=5)
    client.configure(kopf.ConnectionInfo(server="http://127.0.0.1:9", insecure=True))
    renderer = SkillRenderer(client, custom_settings)
    try:
        with pytest.raises(SkillTemplateError, match="cannot read the template ConfigMap"):
            await renderer.render(make_sandbox())
    finally:
        await client.close()


async def test_an_api_error_while_the_template_is_read_again_keeps_the_last_good_one(
    kube: KubeClient,
    emulator: KubeEmulator,
    custom_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An API server away for a moment must not put every sandbox on the fallback."""
    emulator.create("v1/configmaps", template_configmap())
    renderer = SkillRenderer(kube, custom_settings, ttl=0)
    await renderer.render(make_sandbox(sources=SOURCES))

    async def away(*args: Any, **kwargs: Any) -> Any:
        raise ApiError(503, "ServiceUnavailable", "the API server is shutting down")

    monkeypatch.setattr(kube, "get", away)
    rendered = await renderer.render(make_sandbox(sources=[{"name": "jira"}]))
    assert rendered.text.startswith("---\nname: company-search\ndescription: Custom company")
    assert "* jira" in rendered.text


async def test_a_broken_custom_template_is_a_skill_template_error(
    kube: KubeClient, emulator: KubeEmulator, custom_settings: Settings
) -> None:
    emulator.create("v1/configmaps", template_configmap("{% for x in %}"))
    renderer = SkillRenderer(kube, custom_settings)
    with pytest.raises(SkillTemplateError, match="syntax error"):
        await renderer.render(make_sandbox())


async def test_a_missing_template_is_remembered_for_the_ttl_not_read_every_pass(
    kube: KubeClient, emulator: KubeEmulator, custom_settings: Settings
) -> None:
    renderer = SkillRenderer(kube, custom_settings, ttl=3600)
    for uid in ["a", "b", "c"]:
        with pytest.raises(SkillTemplateError, match="does not exist"):
            await renderer.render(make_sandbox(uid, uid, sources=SOURCES))
    assert configmap_reads(emulator) == 1


async def test_a_template_read_again_after_its_ttl_can_recover(
    kube: KubeClient, emulator: KubeEmulator, custom_settings: Settings
) -> None:
    renderer = SkillRenderer(kube, custom_settings, ttl=0)
    with pytest.raises(SkillTemplateError):
        await renderer.render(make_sandbox(sources=SOURCES))
    emulator.create("v1/configmaps", template_configmap())
    rendered = await renderer.render(make_sandbox(sources=SOURCES))
    assert "Custom company search." in rendered.text


async def test_each_read_of_the_same_template_reuses_the_remembered_rendering(
    kube: KubeClient, emulator: KubeEmulator, custom_settings: Settings
) -> None:
    emulator.create("v1/configmaps", template_configmap())
    renderer = SkillRenderer(kube, custom_settings, ttl=0)
    first = await renderer.render(make_sandbox(sources=SOURCES))
    for _ in range(4):
        assert await renderer.render(make_sandbox(sources=SOURCES)) is first
    assert configmap_reads(emulator) == 5, "read every time (ttl 0), remembered once"


class Renders:
    """``render_skill`` as the renderer calls it: counted, the thread noted, and each call
    held until ``release`` is set (it is, unless a test clears it)."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.release = threading.Event()
        self.release.set()

    @property
    def count(self) -> int:
        """Renderings started."""
        return len(self.threads)

    def __call__(self, *args: Any, **kwargs: Any) -> RenderedSkill:
        self.threads.append(threading.current_thread())
        self.release.wait(10)
        return render_skill(*args, **kwargs)


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> Renders:
    """The renderer's calls of ``render_skill``, counted."""
    counted = Renders()
    monkeypatch.setattr(skill_renderer, "render_skill", counted)
    return counted


async def test_a_custom_template_renders_on_a_thread_not_on_the_event_loop(
    kube: KubeClient, emulator: KubeEmulator, custom_settings: Settings, renders: Renders
) -> None:
    emulator.create("v1/configmaps", template_configmap())
    renderer = SkillRenderer(kube, custom_settings)
    await renderer.render(make_sandbox(sources=SOURCES))
    await renderer.render(make_sandbox(sources=SOURCES), builtin=True)
    custom, builtin = renders.threads
    assert custom.name.startswith("craft-render-"), "its own threads, not the library's"
    assert builtin is threading.main_thread()


async def test_a_rendering_past_its_deadline_goes_on_for_the_next_pass_and_the_loop_runs(
    kube: KubeClient, emulator: KubeEmulator, custom_settings: Settings, renders: Renders
) -> None:
    emulator.create("v1/configmaps", template_configmap())
    renders.release.clear()
    renderer = SkillRenderer(kube, custom_settings, render_timeout=0.3)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    try:
        for _ in range(2):
            with pytest.raises(SkillTemplateError, match=r"still rendering after 0\.3 s"):
                await renderer.render(make_sandbox(sources=SOURCES))
    finally:
        ticker.cancel()
    assert ticks >= 20, "the event loop went on while the template rendered"
    renders.release.set()
    rendered = await renderer.render(make_sandbox(sources=SOURCES))
    assert "Custom company search." in rendered.text
    assert renders.count == 1, "one rendering, whose outcome the later passes took"
    assert await renderer.render(make_sandbox(sources=SOURCES)) is rendered


async def test_a_rendering_that_ends_after_its_pass_gave_up_is_remembered(
    kube: KubeClient, emulator: KubeEmulator, custom_settings: Settings, renders: Renders
) -> None:
    emulator.create("v1/configmaps", template_configmap(TEMPLATE + "{{ 1 // 0 }}"))
    renders.release.clear()
    renderer = SkillRenderer(kube, custom_settings, render_timeout=0.2)
    with pytest.raises(SkillTemplateError, match="still rendering"):
        await renderer.render(make_sandbox(sources=SOURCES))
    renders.release.set()
    await asyncio.sleep(0.5)  # the thread ends with no pass waiting for it
    for _ in range(2):
        with pytest.raises(SkillTemplateError, match="ZeroDivisionError"):
            await renderer.render(make_sandbox(sources=SOURCES))
    assert renders.count == 1


async def test_a_template_that_fails_for_some_sources_is_not_run_again_for_them(
    kube: KubeClient, emulator: KubeEmulator, custom_settings: Settings, renders: Renders
) -> None:
    failing = TEMPLATE + "{{ 1 // source_count }}"
    emulator.create("v1/configmaps", template_configmap(failing))
    renderer = SkillRenderer(kube, custom_settings, ttl=0)
    for _ in range(3):
        with pytest.raises(SkillTemplateError, match="ZeroDivisionError"):
            await renderer.render(make_sandbox(sources=[]))
    assert renders.count == 1, "the failure is remembered while sources and template stay the same"
    await renderer.render(make_sandbox(sources=SOURCES))
    assert renders.count == 2, "other sources are rendered"
    emulator.patch(
        "v1/configmaps",
        "craft-system",
        "skill-template",
        {"data": {TEMPLATE_CONFIGMAP_KEY: TEMPLATE}},
    )
    await renderer.render(make_sandbox(sources=[]))
    assert renders.count == 3, "a changed template is tried again"
