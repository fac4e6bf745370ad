"""A pass over one sandbox for the steps' tests: the real ports where they are cheap (the
emulator's API, the object cache, the skill renderer), doubles where they are not (the PAT
store, the exec transport, the event sink).

``world.pass_(spec=..., status=...)`` builds a :class:`Pass` as the reconciler would;
``world.events`` lists what the steps said.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from craft_operator.api.models import CraftSandbox
from craft_operator.api.parse import parse_sandbox
from craft_operator.config import Settings
from craft_operator.credentials.errors import CredentialsError
from craft_operator.credentials.model import IssuedCredential, Revocation
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import KubeClient
from craft_operator.kube.event_batch import steps_of
from craft_operator.kube.exec import ExecError, ExecResult, Stdin
from craft_operator.library import LibraryLocation, SyncResult
from craft_operator.metrics import Metrics
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.run import Run
from craft_operator.reconciler.skill_renderer import SkillRenderer
from craft_operator.reconciler.step import Memory, Pass
from craft_operator.reconciler.steps.cli import EXIT_NOT_DELIVERED
from craft_operator.reconciler.table import CONDITIONS
from tests.support.emulator import KubeEmulator
from tests.unit.reconciler.conftest import NAMESPACE

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
NAME, UID = "alice", "sandbox-uid-1"
#: A token that must never appear outside the Secret.
CANARY = "onyx_pat_CANARY-steps-0123456789abcdef"


@dataclass
class Credentials:
    """The PAT store's port: hands out PAT 1, then a new PAT per rejected one."""

    error: CredentialsError | None = None
    lifetime: timedelta = timedelta(days=30)
    calls: list[int | None] = field(default_factory=list)
    pat_id: int = 1
    #: The PAT in its grace period that every issued credential carries.
    grace_pat_id: int | None = None
    #: The PAT ids ``retire`` was called with.
    retired: list[int] = field(default_factory=list)
    #: The sandboxes ``revoke`` was called for: uid and creation time.
    revoked: list[tuple[str, datetime | None]] = field(default_factory=list)
    #: When the PAT is read from the database again, as the adapter's memory says.
    recheck_at: datetime | None = None
    #: Why the store says a PAT that replaced none was minted.
    mint_reason: str | None = None

    def issued(self, *, minted: bool, superseded: int | None = None) -> IssuedCredential:
        """The PAT as the store would return it."""
        return IssuedCredential(
            token=SecretStr(CANARY),
            pat_id=self.pat_id,
            token_display="onyx_pat_CAN...cdef",
            created_at=NOW,
            expires_at=NOW + self.lifetime,
            minted=minted,
            superseded_pat_id=superseded,
            reason="the Onyx server refused it" if superseded else self._first_reason(minted),
            grace_pat_id=self.grace_pat_id,
            grace_expires_at=NOW + timedelta(minutes=5) if self.grace_pat_id else None,
            recheck_at=self.recheck_at,
        )

    def _first_reason(self, minted: bool) -> str | None:
        return self.mint_reason if minted else None

    async def ensure(
        self, sandbox: CraftSandbox, *, rejected_pat_id: int | None = None
    ) -> IssuedCredential:
        self.calls.append(rejected_pat_id)
        if self.error is not None:
            raise self.error
        if rejected_pat_id == self.pat_id:
            self.pat_id += 1
            return self.issued(minted=True, superseded=rejected_pat_id)
        return self.issued(minted=len(self.calls) == 1)

    async def revoke(
        self, namespace: str, name: str, uid: str, *, created_at: datetime | None = None
    ) -> Revocation:
        self.revoked.append((uid, created_at))
        return Revocation.REVOKED

    def forget(self, uid: str) -> None:
        return None

    async def retire(self, namespace: str, name: str, uid: str, pat_id: int) -> int | None:
        self.retired.append(pat_id)
        return None


def onyx_cli_stderr(exit_code: int) -> bytes:
    """What onyx-cli prints when it exits with ``exit_code`` (4: Onyx refused the PAT)."""
    if exit_code == 4:
        return b"Error: connection check failed: invalid personal access token.\n"
    return b"refused" if exit_code else b""


@dataclass
class Exec:
    """The exec port: the PAT's delivery fails if ``deliver_exit`` (what it was sent is in
    ``delivered``), onyx-cli run after it exits with ``cli_exit``; every call is recorded."""

    cli_exit: int = 0
    #: What onyx-cli prints on stderr (if empty: :func:`onyx_cli_stderr` of ``cli_exit``).
    cli_stderr: bytes = b""
    deliver_exit: int = 0
    #: The exit code of the script when the SKILL.md carried with the PAT fails (0: none;
    #: the SKILL.md's own script then fails too).
    skill_exit: int = 0
    #: A hostile pod: what the delivery is sent on stdin comes back on its stderr.
    echo_stdin: bool = False
    calls: list[tuple[str, ...]] = field(default_factory=list)
    delivered: list[bytes] = field(default_factory=list)
    #: SKILL.md contents written into claimed pods, alone or with a PAT.
    skills: list[bytes] = field(default_factory=list)
    #: When set, a PAT delivery (with a SKILL.md or not) waits for it (onyx-cli slow).
    hold_delivery: asyncio.Event | None = None
    #: When set, a PAT delivery raises it (the exec itself failed).
    delivery_error: ExecError | None = None
    #: When set, a SKILL.md written alone waits for it (a pod that stalls the exec).
    hold_skill: asyncio.Event | None = None
    #: When set, a SKILL.md written alone raises it (its exec timed out, say).
    skill_error: ExecError | None = None

    async def run(
        self,
        namespace: str,
        pod: str,
        container: str,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        timeout: float | None = None,  # noqa: ASYNC109 -- the ExecTransport interface
        max_output_bytes: int | None = None,
    ) -> ExecResult:
        self.calls.append(tuple(argv))
        delivery = argv[0] == "sh" and argv[3] in ("deliver-pat", "deliver-pat-and-skill")
        if delivery and self.hold_delivery is not None:
            await self.hold_delivery.wait()
        if delivery and self.delivery_error is not None:
            raise self.delivery_error
        if argv[0] == "sh" and "deliver-pat-and-skill" in argv:
            # argv: sh -c SCRIPT deliver-pat-and-skill PAT_FILE SKILL_FILE PAT_BYTES SKILL_BYTES
            assert isinstance(stdin, bytes), "the PAT and the SKILL.md go on stdin"
            pat_bytes, skill_bytes = int(argv[6]), int(argv[7])
            assert len(stdin) == pat_bytes + skill_bytes, "the script checks both lengths"
            self.delivered.append(stdin[:pat_bytes])
            self.skills.append(stdin[pat_bytes:])
            if self.deliver_exit:
                return ExecResult(EXIT_NOT_DELIVERED, b"", b"read-only file system")
            if self.skill_exit:
                return ExecResult(self.skill_exit, b"", b"no space left on device")
        elif argv[0] == "sh" and "deliver-pat" in argv:
            assert isinstance(stdin, bytes), "the PAT goes on stdin"
            assert stdin.endswith(b"\n"), "as one line: the script checks that it all came"
            self.delivered.append(stdin.removesuffix(b"\n"))
            if self.deliver_exit:  # the script's own code when the write failed
                return ExecResult(EXIT_NOT_DELIVERED, b"", b"read-only file system")
        elif argv[0] == "sh":
            # argv: sh -c SCRIPT deliver-skill SKILL_FILE SKILL_BYTES
            if self.hold_skill is not None:
                await self.hold_skill.wait()
            if self.skill_error is not None:
                raise self.skill_error
            assert isinstance(stdin, bytes)
            assert len(stdin) == int(argv[5]), "the script checks the length"
            self.skills.append(stdin)  # a claimed pod's SKILL.md, alone
            return ExecResult(1 if self.skill_exit else 0, b"", b"")
        if self.echo_stdin and isinstance(stdin, bytes):
            # The token whole, then its tail alone (no prefix) as the last thing printed.
            return ExecResult(self.cli_exit, b"", stdin + b"\nKilled " + stdin[-30:])
        return ExecResult(self.cli_exit, b"", self.cli_stderr or onyx_cli_stderr(self.cli_exit))


@dataclass
class Events:
    """The event sink: (type, reason, message) in the order posted."""

    posted: list[tuple[str, str, str]] = field(default_factory=list)

    def post(self, body: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
        self.posted.append((type, reason, message))

    @property
    def reasons(self) -> list[str]:
        """The reasons posted, in order."""
        return [reason for _, reason, _ in self.posted]

    @property
    def steps(self) -> list[str]:
        """The reasons of the steps the events said, in order (a pass's coalesced Normal
        event gives each of its steps)."""
        return [
            step
            for type_, reason, message in self.posted
            for step, _ in steps_of({"type": type_, "reason": reason, "message": message})
        ]


class NoLibrary:
    """The library port, for steps that must not sync."""

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
        raise AssertionError("no library sync expected")

    async def forget(self, uid: str) -> None:
        return None

    async def close(self) -> None:
        return None


class AnsweringLibrary(NoLibrary):
    """The library port, answering every sync with ``result``."""

    def __init__(self, result: SyncResult) -> None:
        self.result = result

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
        return self.result


def sandbox_body(
    spec: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A CraftSandbox as the cache holds it (generation 1, the finalizer added)."""
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "uid": UID,
            "generation": 1,
            "resourceVersion": "1",
            "annotations": dict(annotations or {}),
        },
        "spec": {"user": {"id": "11111111-2222-3333-4444-555555555555"}, **(spec or {})},
        "status": dict(status or {}),
    }


@dataclass
class World:
    """The ports of one test, and a way to build passes over them."""

    emulator: KubeEmulator
    services: Services
    credentials: Credentials
    exec: Exec
    events: Events

    @property
    def cache(self) -> ObjectCache:
        """The object cache the steps read."""
        return self.services.cache

    def pass_(self, *, memory: Memory | None = None, now: datetime = NOW, **body: Any) -> Pass:
        """A pass over the sandbox (see :func:`sandbox_body` for the arguments), at ``now``,
        with what earlier passes remembered (``memory``; else nothing)."""
        built = sandbox_body(**body)
        run = Run(built, now, CONDITIONS)
        return Pass(self.services, parse_sandbox(built), run, memory or Memory())

    def stored(self, resource: str, name: str) -> dict[str, Any] | None:
        """An object as the API server holds it."""
        return self.emulator.find(resource, NAMESPACE, name)

    def add_foreign_pod(self, name: str) -> dict[str, Any]:
        """A pod of ``name`` that someone else made (no owner), as stored."""
        return self.emulator.create(
            "v1/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"containers": [{"name": "x", "image": "busybox"}]},
            },
        )


def settings_for(tmp_path: Path, **overrides: Any) -> Settings:
    """Operator settings for a step test (egress unrestricted unless a test says not)."""
    values: dict[str, Any] = {
        "state_dir": tmp_path,
        "sandbox_image": "registry.example.com/craft/sandbox:1",
        "server_url": "http://onyx.internal:8080",
        "allow_unrestricted_egress": True,
        **overrides,
    }
    return Settings(**values)


@pytest.fixture
def make_world(emulator: KubeEmulator, kube: KubeClient, tmp_path: Path) -> Callable[..., World]:
    """Build the world with settings overridden as a test needs."""

    def build(**overrides: Any) -> World:
        settings = settings_for(tmp_path, **overrides)
        credentials, exec_, events = Credentials(), Exec(), Events()
        services = Services(
            settings=settings,
            kube=kube,
            cache=ObjectCache(),
            credentials=credentials,
            skills=SkillRenderer(kube, settings),
            exec=exec_,
            events=events,
            library=NoLibrary(),
            clock=lambda: NOW,
            metrics=Metrics(),
        )
        return World(emulator, services, credentials, exec_, events)

    return build


@pytest.fixture
def world(make_world: Callable[..., World]) -> World:
    """The world with the default settings."""
    return make_world()
