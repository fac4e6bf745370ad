"""The memory of renderings: bounded by entries and by the text it holds, keyed by digest."""

from __future__ import annotations

import pytest

from craft_operator.api.models import Source
from craft_operator.skills.memo import FAILURE_SECONDS, MAX_FAILURE_CHARS, RenderMemo
from craft_operator.skills.render import render_skill, sources_digest

pytestmark = pytest.mark.unit


def test_a_remembered_rendering_is_found_by_its_sources_and_template() -> None:
    memo = RenderMemo()
    rendered = render_skill([Source(name="slack")])
    memo.put(None, rendered)
    assert memo.get(sources_digest([Source(name="slack")]), None) is rendered
    assert memo.get(rendered.sources_hash, "digest-of-another-template") is None
    assert memo.get(sources_digest([Source(name="jira")]), None) is None


def test_it_forgets_the_least_recently_used_beyond_its_entries() -> None:
    memo = RenderMemo(max_entries=2)
    first, second, third = (render_skill([Source(name=n)]) for n in ("a", "b", "c"))
    memo.put(None, first)
    memo.put(None, second)
    assert memo.get(first.sources_hash, None) is first  # now the most recent
    memo.put(None, third)
    assert len(memo) == 2
    assert memo.get(second.sources_hash, None) is None
    assert memo.get(first.sources_hash, None) is first


def test_the_text_it_holds_is_bounded_whatever_the_sources() -> None:
    memo = RenderMemo(max_entries=1000, max_chars=20_000)
    for index in range(200):
        memo.put(None, render_skill([Source(name=f"s{index}", description="x" * 400)]))
        assert memo.chars <= 20_000
    assert 0 < len(memo) < 200


def test_a_rendering_larger_than_the_whole_memory_is_not_kept() -> None:
    memo = RenderMemo(max_chars=10)
    memo.put(None, render_skill([Source(name="slack")]))
    assert len(memo) == 0
    assert memo.chars == 0


def test_a_rendering_too_large_to_keep_does_not_push_out_those_it_holds() -> None:
    """One sandbox with a huge spec must not make every other sandbox render again."""
    small = render_skill([Source(name="slack")])
    huge = render_skill([Source(name="confluence", description="x" * 300, scopes=["y" * 80])])
    memo = RenderMemo(max_chars=len(small.text) + 10)
    memo.put(None, small)
    memo.put(None, huge)
    assert memo.get(huge.sources_hash, None) is None
    assert memo.get(small.sources_hash, None) is small
    assert memo.chars == len(small.text)


def test_the_digest_tells_apart_sources_differing_in_any_field() -> None:
    digests = {
        sources_digest(sources)
        for sources in (
            [Source(name="a")],
            [Source(name="a", scopes=["x"])],
            [Source(name="a", scopes=["y"])],
            [Source(name="a", description="x")],
            [Source(name="a"), Source(name="b")],
            [Source(name="b", description="x"), Source(name="a")],
        )
    }
    assert len(digests) == 6


def test_a_failure_is_remembered_bounded_in_count_and_in_message_length() -> None:
    memo = RenderMemo(max_entries=2)
    memo.fail("sources-a", "template", "x" * 100_000)
    failure = memo.failure("sources-a", "template")
    assert failure is not None
    assert len(failure) == MAX_FAILURE_CHARS
    assert memo.failure("sources-a", None) is None, "the same sources with another template"
    memo.fail("sources-b", "template", "b")
    memo.fail("sources-c", "template", "c")
    assert memo.failure("sources-a", "template") is None, "the oldest is forgotten"
    assert memo.failure("sources-c", "template") == "c"


def test_a_failure_is_forgotten_after_a_while_for_it_may_have_been_of_the_moment() -> None:
    now = [1000.0]
    memo = RenderMemo(clock=lambda: now[0])
    memo.fail("sources", "template", "MemoryError")
    now[0] += FAILURE_SECONDS - 1
    assert memo.failure("sources", "template") == "MemoryError"
    now[0] += 1
    assert memo.failure("sources", "template") is None
