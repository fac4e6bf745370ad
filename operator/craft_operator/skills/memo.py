"""A bounded memory of renderings, so sandboxes with the same sources and template share
one rendering. (A pass over an unchanged sandbox renders nothing whatever this memory
holds: the skill step keeps what the sandbox's ConfigMap holds, :mod:`steps.skill
<craft_operator.reconciler.steps.skill>`; a least-recently-used memory smaller than the
fleet would forget every rendering before a resync came back to it.)

Bounded by entries *and* by the bytes of the renderings it holds: a spec may carry about
1 MB of sources, and every edit of them is a new key, so a memory bounded only by count
could be made to hold gigabytes. Keys are digests of the sources and of the template
(``None``: the built-in one), never their text.

It remembers failures too, for :data:`FAILURE_SECONDS`: a template that fails for some
sources mostly fails the same way every time (a rendering is a pure function of both), so
a sandbox retrying is answered from memory, not by running a template that may have spent
its whole CPU budget; but a failure of the moment (memory short, a budget crossed on a
loaded machine) must not stand until the template or the sources change.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from craft_operator.skills.render import RenderedSkill

#: Renderings remembered at most.
MAX_ENTRIES = 1024
#: Characters of rendered text remembered at most (a rendering is at most 256 Ki chars).
MAX_CHARS = 8 * 1024 * 1024
#: Characters of a failure's message remembered at most.
MAX_FAILURE_CHARS = 1024
#: Seconds a failure is remembered.
FAILURE_SECONDS = 300.0


class RenderMemo:
    """Least-recently-used renderings by (sources digest, template digest)."""

    def __init__(
        self,
        *,
        max_entries: int = MAX_ENTRIES,
        max_chars: int = MAX_CHARS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Remember at most ``max_entries`` renderings and ``max_chars`` of their text."""
        self._entries: OrderedDict[tuple[str, str | None], RenderedSkill] = OrderedDict()
        self._failures: OrderedDict[tuple[str, str | None], tuple[float, str]] = OrderedDict()
        self._clock = clock
        self._chars = 0
        self._max_entries = max_entries
        self._max_chars = max_chars

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def chars(self) -> int:
        """Characters of rendered text held."""
        return self._chars

    def get(self, sources_hash: str, template_hash: str | None) -> RenderedSkill | None:
        """The remembered rendering of these sources with that template, if any."""
        key = (sources_hash, template_hash)
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def put(self, template_hash: str | None, rendered: RenderedSkill) -> None:
        """Remember ``rendered`` (made with that template), forgetting the least recent."""
        key = (rendered.sources_hash, template_hash)
        previous = self._entries.pop(key, None)
        if previous is not None:
            self._chars -= len(previous.text)
        if len(rendered.text) > self._max_chars:
            return
        self._entries[key] = rendered
        self._chars += len(rendered.text)
        while len(self._entries) > self._max_entries or self._chars > self._max_chars:
            _, dropped = self._entries.popitem(last=False)
            self._chars -= len(dropped.text)

    def failure(self, sources_hash: str, template_hash: str | None) -> str | None:
        """Why these sources failed to render with that template, if they did within the
        last :data:`FAILURE_SECONDS`."""
        key = (sources_hash, template_hash)
        found = self._failures.get(key)
        if found is None:
            return None
        when, message = found
        if self._clock() - when >= FAILURE_SECONDS:
            del self._failures[key]
            return None
        return message

    def fail(self, sources_hash: str, template_hash: str | None, message: str) -> None:
        """Remember that these sources fail to render with that template, and why."""
        key = (sources_hash, template_hash)
        self._failures.pop(key, None)
        self._failures[key] = (self._clock(), message[:MAX_FAILURE_CHARS])
        while len(self._failures) > self._max_entries:
            self._failures.popitem(last=False)
