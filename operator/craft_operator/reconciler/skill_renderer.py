"""The reconciler's SKILL.md renderer: the built-in template or the platform's, read from its
ConfigMap, with renderings (and failures) remembered, since the same sources and template
give the same text.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

from craft_operator.api.models import CraftSandbox
from craft_operator.api.spec import Source
from craft_operator.config import Settings
from craft_operator.daemon_threads import DaemonThreadPool
from craft_operator.kube.client import CONFIGMAPS, ApiError, KubeClient, NotFoundError
from craft_operator.skills.memo import RenderMemo
from craft_operator.skills.render import (
    RenderedSkill,
    render_skill,
    sources_digest,
    template_digest,
)
from craft_operator.skills.template import SkillTemplateError, template_from_configmap

#: Threads that render custom templates.
RENDER_THREADS = 2
#: Seconds a pass waits for a custom template's rendering (its CPU budget is 2 s; the rest
#: allows for a busy interpreter); one not done by then goes on for the next pass.
RENDER_TIMEOUT_S = 15.0


class SkillRenderer:
    """Renders SKILL.md; reads the platform's template ConfigMap at most every ``ttl`` s.

    A failure to read or use the template is remembered for ``ttl`` seconds too, so the
    passes that retry it meanwhile cost no request; a failure to render some sources with
    some template is remembered for a while (:data:`~craft_operator.skills.memo.FAILURE_SECONDS`).
    """

    def __init__(
        self,
        kube: KubeClient,
        settings: Settings,
        *,
        ttl: float = 30.0,
        render_timeout: float = RENDER_TIMEOUT_S,
    ) -> None:
        self._kube = kube
        self._ref = settings.skill_template_configmap_ref
        self._ttl = ttl
        self._render_timeout = render_timeout
        #: When the template was last read, and its text or why there is none.
        self._template: tuple[float, str | None, str | None] | None = None
        self._lock = asyncio.Lock()
        self._memo = RenderMemo()
        #: Threads of their own: a template spending its whole CPU budget for each new set
        #: of sources must not hold the threads the library's sync needs.
        self._threads = DaemonThreadPool(RENDER_THREADS, name="craft-render")
        #: Custom renderings under way, by (sources digest, template digest).
        self._rendering: dict[tuple[str, str | None], asyncio.Future[RenderedSkill]] = {}
        self._template_digest: tuple[str, str] | None = None

    async def inputs(self, sandbox: CraftSandbox) -> tuple[str, str | None]:
        """What :meth:`render` renders ``sandbox``'s SKILL.md from, as digests: its sources'
        and the configured template's (``None``: the built-in one); raises
        :class:`SkillTemplateError` when the template cannot be read."""
        template = await self._custom_template()
        template_hash = None if template is None else self._digest(template)
        return sources_digest(sandbox.spec.sources), template_hash

    async def render(self, sandbox: CraftSandbox, *, builtin: bool = False) -> RenderedSkill:
        """The SKILL.md for ``sandbox``'s sources."""
        template = None if builtin else await self._custom_template()
        template_hash = None if template is None else self._digest(template)
        sources = sandbox.spec.sources
        key = (sources_digest(sources), template_hash)
        found = self._memo.get(*key)
        if found is not None:
            return found
        failure = self._memo.failure(*key)
        if failure is not None:
            raise SkillTemplateError(failure)
        if template is None:
            # The built-in template: a fraction of a millisecond, on the event loop.
            try:
                found = render_skill(sources)
            except SkillTemplateError as exc:
                self._memo.fail(*key, str(exc))
                raise
            self._memo.put(template_hash, found)
            return found
        return await self._render_custom(key, sources, template)

    async def _render_custom(
        self, key: tuple[str, str | None], sources: Sequence[Source], template: str
    ) -> RenderedSkill:
        """Render with the platform's template, which may be large or slow, on a daemon
        thread; wait for it at most the deadline. A rendering still running then goes on,
        and the passes after wait for that one (never a second thread for the same sources
        and template); its outcome is remembered when it ends, whoever waits."""
        rendering = self._rendering.get(key)
        if rendering is None:
            rendering = asyncio.get_running_loop().run_in_executor(
                self._threads, functools.partial(render_skill, sources, template=template)
            )
            self._rendering[key] = rendering
            rendering.add_done_callback(functools.partial(self._rendered, key))
        try:
            return await asyncio.wait_for(asyncio.shield(rendering), self._render_timeout)
        except TimeoutError:
            raise SkillTemplateError(
                f"company-search template is still rendering after {self._render_timeout:g} "
                "s; the rendering goes on, and the next pass takes its outcome"
            ) from None

    def _rendered(
        self, key: tuple[str, str | None], rendering: asyncio.Future[RenderedSkill]
    ) -> None:
        """Remember how a custom template's rendering ended."""
        del self._rendering[key]
        if rendering.cancelled():
            return
        error = rendering.exception()
        if isinstance(error, SkillTemplateError):
            self._memo.fail(*key, str(error))
        elif error is None:
            self._memo.put(key[1], rendering.result())

    def _digest(self, template: str) -> str:
        # Worked out once per text read, not per render (a template may be 1 MiB).
        if self._template_digest is None or self._template_digest[0] is not template:
            self._template_digest = (template, template_digest(template))
        return self._template_digest[1]

    async def _custom_template(self) -> str | None:
        if self._ref is None:
            return None
        loop = asyncio.get_running_loop()
        async with self._lock:
            if self._template is None or loop.time() - self._template[0] >= self._ttl:
                self._template = (loop.time(), *await self._read_template())
            _, text, error = self._template
            if error is not None:
                raise SkillTemplateError(error)
            return text

    async def _read_template(self) -> tuple[str | None, str | None]:
        """The template's text, or why there is none (the last good text after an API
        error that may pass)."""
        assert self._ref is not None
        namespace, name = self._ref
        reference = f"{namespace}/{name}"
        try:
            configmap = await self._kube.get(CONFIGMAPS, namespace, name)
        except NotFoundError:
            return None, f"the template ConfigMap {reference} does not exist"
        except ApiError as exc:
            last_good = self._template[1] if self._template is not None else None
            if last_good is not None:
                return last_good, None
            return None, f"cannot read the template ConfigMap {reference}: {exc}"
        try:
            return template_from_configmap(configmap.get("data"), reference=reference), None
        except SkillTemplateError as exc:
            return None, str(exc)
