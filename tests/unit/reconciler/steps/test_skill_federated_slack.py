"""A sandbox whose SKILL.md an earlier operator rendered with `federated_slack` (which
Onyx's search rejects for `--source`) gets it rewritten once, listing `slack`, even while
the platform's template fails, and is left alone after that."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from craft_operator.builders.naming import ANNOTATION_SOURCES_HASH
from craft_operator.kube import kinds
from craft_operator.reconciler.steps import skill
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import NAME, World
from tests.unit.reconciler.steps.test_skill_ownership import break_template

pytestmark = pytest.mark.unit
SOURCES = {"sources": [{"name": "federated_slack"}]}
#: The `craft.onyx.app/sources-hash` the earlier operator wrote for these sources.
EARLIER_DIGEST = hashlib.sha256(
    json.dumps({"listed": [["federated_slack", None, None]], "unknown": []}).encode()
).hexdigest()


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def earlier(world: World) -> dict[str, Any]:
    """The sandbox's status as the earlier operator left it, its ConfigMap in the cache."""
    first = world.pass_(spec=SOURCES)
    assert await skill.render_skill(first) is None
    text = world.stored("v1/configmaps", f"{NAME}-skills")["data"]["SKILL.md"]
    earlier = text.replace("`slack` —", "`federated_slack` —").replace(
        "--source slack`", "--source federated_slack`"
    )
    assert "- `federated_slack` —" in earlier
    patched = world.emulator.patch(
        "v1/configmaps",
        NAMESPACE,
        f"{NAME}-skills",
        {
            "metadata": {"annotations": {ANNOTATION_SOURCES_HASH: EARLIER_DIGEST}},
            "data": {"SKILL.md": earlier},
        },
    )
    world.cache.put(kinds.CONFIGMAP.name, patched)
    return {"skill": {"sourceCount": 1, "contentHash": sha256(earlier)}}


async def rewritten_then_stable(world: World, status: dict[str, Any]) -> None:
    p = world.pass_(spec=SOURCES, status=status)
    await skill.render_skill(p)
    stored = world.stored("v1/configmaps", f"{NAME}-skills")
    text = stored["data"]["SKILL.md"]
    assert "federated_slack" not in text
    assert "- `slack` — Slack messages searched live" in text
    assert p.run.status.skill is not None
    assert p.run.status.skill.content_hash == sha256(text)
    assert stored["metadata"]["annotations"][ANNOTATION_SOURCES_HASH] != EARLIER_DIGEST
    world.cache.put(kinds.CONFIGMAP.name, stored)

    status = {"skill": p.run.status.skill.model_dump(by_alias=True)}
    await skill.render_skill(world.pass_(spec=SOURCES, status=status))
    again = world.stored("v1/configmaps", f"{NAME}-skills")
    assert again["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]


async def test_an_earlier_federated_slack_skill_is_rewritten_once(world: World) -> None:
    status = await earlier(world)
    await rewritten_then_stable(world, status)


async def test_it_is_rewritten_once_even_while_the_template_fails(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    status = await earlier(world)
    break_template(world, monkeypatch)
    await rewritten_then_stable(world, status)
