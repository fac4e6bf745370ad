"""A representative rendering, byte for byte.

Regenerate after an intended change to the template or catalog with
``CRAFT_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/skills/test_golden.py`` and review the diff.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from craft_operator.api.models import Source
from craft_operator.skills import render_skill

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden" / "three_sources.SKILL.md"

# Three sources: one with more than five scopes, one whose description overrides the
# catalog, one described by the catalog. Given out of order, with an internal source.
SOURCES = [
    Source(
        name="slack",
        scopes=["#eng", "#incidents", "#support", "#release-train", "#design", "#random"],
    ),
    Source(name="user_file"),
    Source(
        name="confluence", description="Engineering wiki: runbooks, design docs and postmortems."
    ),
    Source(name="google_drive"),
]


def test_the_representative_rendering_matches_the_golden_file() -> None:
    rendered = render_skill(SOURCES)
    if os.environ.get("CRAFT_UPDATE_GOLDEN"):
        GOLDEN.write_text(rendered.text, encoding="utf-8")
    assert rendered.text == GOLDEN.read_text(encoding="utf-8")
    assert rendered.source_count == 3
    assert rendered.unknown_sources == ()
    assert rendered.content_hash == hashlib.sha256(GOLDEN.read_bytes()).hexdigest()
