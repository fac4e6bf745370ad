"""What the reconciler needs from the outside world, as small interfaces.

The real implementations live with their domains (credentials, skills, kube); tests plug in
the same ones against SQLite, the emulator and a local exec double.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from pydantic import SecretStr

from craft_operator.api.models import CraftSandbox
from craft_operator.credentials.model import Revocation
from craft_operator.library import LibraryLocation, SyncResult
from craft_operator.skills.render import RenderedSkill


class IssuedCredential(Protocol):
    """A live PAT for a sandbox (the token is a SecretStr: it never prints)."""

    @property
    def token(self) -> SecretStr:
        """The raw token."""
        ...

    @property
    def pat_id(self) -> int:
        """The PAT's id in the database."""
        ...

    @property
    def token_display(self) -> str:
        """The display form (first 12 and last 4 characters)."""
        ...

    @property
    def created_at(self) -> datetime:
        """When the PAT was minted."""
        ...

    @property
    def expires_at(self) -> datetime | None:
        """When it expires."""
        ...

    @property
    def minted(self) -> bool:
        """Whether this call minted it (False: an existing PAT was reused)."""
        ...

    @property
    def reason(self) -> str | None:
        """Why it was minted (``None`` when reused)."""
        ...

    @property
    def superseded_pat_id(self) -> int | None:
        """The PAT this call's mint replaced, if any: revoked at once, or, after a renewal,
        left live in its grace period (then it is ``grace_pat_id`` too)."""
        ...

    @property
    def grace_pat_id(self) -> int | None:
        """The PAT this one renewed, still live in its grace period (expiring within
        CRAFT_CREDENTIAL_RENEWAL_GRACE) until the pod is shown to use this one; ``None``
        once it expired or was retired. Set on reuse too."""
        ...

    @property
    def grace_expires_at(self) -> datetime | None:
        """When ``grace_pat_id`` expires (Onyx refuses it from then on)."""
        ...

    @property
    def recheck_at(self) -> datetime | None:
        """When the PAT is read from the database again at the latest (``None``: on every
        call): a pass that comes back by then has anything done to it out of band noticed."""
        ...


class CredentialsPort(Protocol):
    """Mints, reuses and revokes the PAT of a sandbox."""

    async def ensure(
        self, sandbox: CraftSandbox, *, rejected_pat_id: int | None = None
    ) -> IssuedCredential:
        """A live PAT for the sandbox, minting one when needed.

        ``rejected_pat_id`` names a PAT the Onyx server refused: mint a replacement unless
        the stored PAT is already another one.
        """
        ...

    async def revoke(
        self, namespace: str, name: str, uid: str, *, created_at: datetime | None = None
    ) -> Revocation:
        """Revoke the sandbox's PAT (and the one in its grace period); false if it had none,
        :attr:`Revocation.NOT_IN_ONYX` if its PAT was gone from Onyx (its row is forgotten).

        ``created_at`` (the sandbox's creation) keeps a later namesake's PAT from being
        revoked by a stale copy of a deleted sandbox."""
        ...

    async def retire(self, namespace: str, name: str, uid: str, pat_id: int) -> int | None:
        """The pod now uses PAT ``pat_id``: revoke the PAT it superseded, if it is still in
        its grace period; returns the revoked id.

        Only when ``pat_id`` is the sandbox's current PAT (this uid's); idempotent; never
        revokes any other PAT.
        """
        ...

    def forget(self, uid: str) -> None:
        """Drop what is remembered of the PAT of sandbox ``uid`` (it is gone, or its PAT
        was revoked out of band); nothing in the database changes."""
        ...


class SkillsPort(Protocol):
    """Renders the company-search SKILL.md for a sandbox."""

    async def inputs(self, sandbox: CraftSandbox) -> tuple[str, str | None]:
        """What :meth:`render` would render from, as digests: the sandbox's sources' and the
        configured template's (``None``: the built-in one), as ``RenderedSkill`` records
        them (``sources_hash``, ``template_hash``).

        Raises :class:`~craft_operator.skills.template.SkillTemplateError` when a custom
        template cannot be loaded.
        """
        ...

    async def render(self, sandbox: CraftSandbox, *, builtin: bool = False) -> RenderedSkill:
        """The rendering with the configured template (``builtin``: the shipped one).

        Raises :class:`~craft_operator.skills.template.SkillTemplateError` when a custom
        template cannot be loaded or rendered.
        """
        ...


class LibraryPort(Protocol):
    """Syncs a user library from S3 into a running sandbox pod."""

    async def sync(
        self,
        sandbox: CraftSandbox,
        location: LibraryLocation,
        *,
        namespace: str,
        pod: str,
        pod_uid: str = "",
        check: Callable[[], None] | None = None,
    ) -> SyncResult:
        """Sync; raises :class:`~craft_operator.library.errors.LibrarySyncError` subclasses.
        ``check`` runs before each exec (:mod:`craft_operator.reconciler.pod_guard`)."""
        ...

    async def forget(self, uid: str) -> None:
        """Drop what is kept about the library of the sandbox with this uid (it is deleted).

        Raises :class:`~craft_operator.credentials.errors.CredentialsError` if the record
        cannot be removed now.
        """
        ...

    async def close(self) -> None:
        """Release connections (at shutdown)."""
        ...


class EventSink(Protocol):
    """Posts Kubernetes events about an object."""

    def post(self, body: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
        """Post one event (``type`` is Normal or Warning)."""
        ...
