"""What the operator's policy step reads: the cached policy and namespace, failing closed."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from craft_operator.api.models import CredentialsStatus
from craft_operator.api.parse import parse_sandbox
from craft_operator.api.status_codec import dump_status
from craft_operator.credentials import DatabaseUnavailableError
from craft_operator.credentials.model import Revocation
from craft_operator.kube.cache import ObjectCache
from craft_operator.metrics import Metrics
from craft_operator.policy.models import TENANT_LABEL
from craft_operator.reconciler.policy_step import (
    MISSING,
    NAMESPACE,
    POLICY,
    UNREADABLE,
    check,
    enforce,
    read_policy,
)
from craft_operator.reconciler.run import Revisit, Run
from craft_operator.reconciler.table import CONDITIONS
from tests.support.policy import policy
from tests.unit.policy.cases import USER
from tests.unit.policy.test_rules import SETTINGS

pytestmark = pytest.mark.unit

BODY: dict[str, Any] = {
    "apiVersion": "craft.onyx.app/v1alpha1",
    "kind": "CraftSandbox",
    "metadata": {
        "name": "alice",
        "namespace": "team-a",
        "uid": "u-1",
        "generation": 2,
        "creationTimestamp": "2026-11-23T11:00:00Z",
    },
    "spec": {"user": {"id": USER}, "image": "registry.example.com/craft/sandbox:1"},
}
SANDBOX = parse_sandbox(BODY)
#: The status of a sandbox running on generation 2 (admitted: it holds a PAT).
RUNNING = {"phase": "Ready", "observedGeneration": 2, "credentials": {"patId": 7}}
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


class Events:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str]] = []
        self.messages: dict[str, str] = {}

    def post(self, body: Any, *, type: str, reason: str, message: str) -> None:
        self.posted.append((type, reason))
        self.messages[reason] = message


class Credentials:
    async def revoke(
        self, namespace: str, name: str, uid: str, *, created_at: datetime | None = None
    ) -> Revocation:
        raise AssertionError("a sandbox kept while the policy is unreadable is not revoked")


def services(cache: ObjectCache) -> Any:
    return SimpleNamespace(
        settings=SETTINGS,
        kube=None,
        cache=cache,
        credentials=Credentials(),
        events=Events(),
        metrics=Metrics(),
    )


def cache_with(*, labels: dict[str, str] | None = None, spec: dict | None = None) -> ObjectCache:
    cache = ObjectCache()
    if labels is not None:
        cache.put(NAMESPACE, {"metadata": {"name": "team-a", "labels": labels}})
    if spec is not None:
        cache.put(
            POLICY, {**policy(**spec), "metadata": {"name": "default", "resourceVersion": "7"}}
        )
    return cache


def test_a_sandbox_in_a_namespace_not_seen_yet_is_not_judged_allowed() -> None:
    assert (
        check(SANDBOX, cache_with(spec={"images": ["registry.example.com/craft/"]}), SETTINGS)
        is None
    )


def test_the_cached_policy_allows_what_it_lists() -> None:
    cache = cache_with(labels={}, spec={"images": ["registry.example.com/craft/"]})
    assert check(SANDBOX, cache, SETTINGS) == []


def test_no_policy_object_allows_only_the_defaults() -> None:
    violations = check(SANDBOX, cache_with(labels={}), SETTINGS)
    assert [violation.field for violation in violations or []] == ["spec.image"]


def test_an_unreadable_policy_allows_only_the_defaults() -> None:
    cache = cache_with(labels={}, spec={"images": "registry.example.com/craft/"})
    violations = check(SANDBOX, cache, SETTINGS)
    assert [violation.field for violation in violations or []] == ["spec.image"]


def test_the_namespace_label_is_read_from_the_cache() -> None:
    cache = cache_with(labels={TENANT_LABEL: "acme"}, spec={"images": ["registry.example.com/"]})
    violations = check(SANDBOX, cache, SETTINGS)
    assert [violation.field for violation in violations or []] == ["spec.user.tenantId"]


def test_the_policy_read_says_whether_it_is_missing_or_unreadable() -> None:
    assert read_policy(cache_with(labels={})).absent == MISSING
    assert read_policy(cache_with(labels={}, spec={"images": "not-a-list"})).absent == UNREADABLE
    assert read_policy(cache_with(labels={}, spec={"images": []})).absent is None


async def test_a_sandbox_in_a_namespace_not_seen_yet_waits_with_backoff_and_a_condition() -> None:
    run = Run({**BODY, "status": RUNNING}, NOW, CONDITIONS)

    assert await enforce(services(cache_with(spec={})), SANDBOX, run) is True

    # Retried by the work queue with capped exponential backoff, not every 5 s forever.
    assert run.verdict == Revisit(backoff="WaitingForNamespace")
    credentials = run.condition("CredentialsReady")
    assert credentials is not None
    assert (credentials.status, credentials.reason) == ("Unknown", "WaitingForNamespace")
    assert "namespace team-a" in credentials.message


async def test_an_unreadable_policy_keeps_an_admitted_sandbox_with_a_warning() -> None:
    cache = cache_with(labels={}, spec={"images": "not-a-list"})
    run, sink = Run({**BODY, "status": RUNNING}, NOW, CONDITIONS), services(cache)

    assert await enforce(sink, SANDBOX, run) is False

    warning = run.condition("PolicyEnforced")
    assert warning is not None
    assert (warning.status, warning.reason) == ("False", "PolicyUnreadable")
    assert sink.events.posted == [("Warning", "PolicyUnreadable")]
    assert run.status.credentials == CredentialsStatus(pat_id=7)


async def test_a_missing_policy_does_not_excuse_another_tenants_namespace() -> None:
    cache = cache_with(labels={TENANT_LABEL: "acme"})
    sink = services(cache)
    revocations: list[tuple[str, datetime | None]] = []

    async def revoke(
        namespace: str, name: str, uid: str, *, created_at: datetime | None = None
    ) -> Revocation:
        revocations.append((uid, created_at))
        return Revocation.REVOKED

    sink.credentials = SimpleNamespace(revoke=revoke)
    run = Run({**BODY, "status": RUNNING}, NOW, CONDITIONS)

    assert await enforce(sink, SANDBOX, run) is True

    assert run.condition("PolicyEnforced") is None
    assert ("Warning", "AccessWithdrawn") in sink.events.posted
    assert revocations == [("u-1", datetime(2026, 11, 23, 11, 0, tzinfo=UTC))], (
        "this sandbox's PAT, not a later namesake's"
    )


class Deletions:
    """The API client of a withdrawal: records each delete and the uid it is made on (its
    precondition)."""

    def __init__(self) -> None:
        self.deleted: list[tuple[str, str, str | None]] = []

    async def delete(self, kind: Any, namespace: str, name: str, **options: Any) -> None:
        self.deleted.append((kind.plural, name, options.get("uid")))


def labelled_child(name: str, uid: str, *, controller: str) -> dict[str, Any]:
    """An object in the cache with the sandbox's labels, controlled by ``controller``."""
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": uid,
            "resourceVersion": "1",
            "labels": {
                "app.kubernetes.io/managed-by": "craft-operator",
                "craft.onyx.app/sandbox": "alice",
            },
            "ownerReferences": [
                {"kind": "CraftSandbox", "name": "alice", "uid": controller, "controller": True}
            ],
        }
    }


async def test_a_withdrawal_deletes_only_the_sandboxs_own_children_each_on_its_uid() -> None:
    """Someone else's ConfigMap under the skills' name, with the sandbox's labels copied,
    is left alone; the sandbox's own Secret is deleted only if it is still that very
    object (a successor under its name is refused by the API server)."""
    cache = cache_with(labels={TENANT_LABEL: "acme"})
    cache.put("Secret", labelled_child("alice-credentials", "secret-1", controller="u-1"))
    cache.put("ConfigMap", labelled_child("alice-skills", "foreign-9", controller="u-mallory"))
    sink = services(cache)
    sink.kube = Deletions()

    async def revoke(
        namespace: str, name: str, uid: str, *, created_at: datetime | None = None
    ) -> Revocation:
        return Revocation.REVOKED

    sink.credentials = SimpleNamespace(revoke=revoke)
    run = Run({**BODY, "status": RUNNING}, NOW, CONDITIONS)

    assert await enforce(sink, SANDBOX, run) is True

    assert sink.kube.deleted == [("secrets", "alice-credentials", "secret-1")]


@pytest.mark.parametrize(
    ("revocation", "said"),
    [
        (Revocation.REVOKED, "revoked the PAT"),
        (Revocation.NOT_IN_ONYX, "forgot the PAT (no longer in Onyx)"),
    ],
)
async def test_a_withdrawal_says_whether_the_pat_was_revoked_or_already_gone_from_onyx(
    revocation: Revocation, said: str
) -> None:
    sink = services(cache_with(labels={TENANT_LABEL: "acme"}))

    async def revoke(
        namespace: str, name: str, uid: str, *, created_at: datetime | None = None
    ) -> Revocation:
        return revocation

    sink.credentials = SimpleNamespace(revoke=revoke)
    run = Run({**BODY, "status": RUNNING}, NOW, CONDITIONS)

    assert await enforce(sink, SANDBOX, run) is True

    withdrawn = sink.events.messages["AccessWithdrawn"]
    assert said in withdrawn
    assert ("revoked" in withdrawn) is (revocation is Revocation.REVOKED)


class FlakyRevocation:
    """The credentials store: the first revocation finds the database down."""

    def __init__(self) -> None:
        self.calls = 0

    async def revoke(
        self, namespace: str, name: str, uid: str, *, created_at: datetime | None = None
    ) -> Revocation:
        self.calls += 1
        if self.calls == 1:
            raise DatabaseUnavailableError("the credentials database is unreachable")
        return Revocation.REVOKED


async def test_a_denial_whose_revocation_failed_revokes_on_the_next_pass() -> None:
    """The first pass deletes the Secret; the PAT stays on record until it is revoked, so
    the retry still knows there is one to revoke."""
    sink = services(cache_with(labels={TENANT_LABEL: "acme"}))
    sink.credentials = FlakyRevocation()
    first = Run({**BODY, "status": RUNNING}, NOW, CONDITIONS)

    assert await enforce(sink, SANDBOX, first) is True
    assert first.status.credentials == CredentialsStatus(pat_id=7)
    refused = first.condition("CredentialsReady")
    assert refused is not None
    assert refused.reason == "RevokeFailed"
    failed = sink.metrics.registry.get_sample_value(
        "craft_pat_errors_total", {"reason": "RevokeFailed"}
    )
    assert failed == 1, "counted as the finalizer's failed revocations are (CraftPATErrors)"

    retry = Run({**BODY, "status": dump_status(first.status)}, NOW, CONDITIONS)
    assert await enforce(sink, SANDBOX, retry) is True

    assert sink.credentials.calls == 2
    assert retry.status.credentials is None
    denied = retry.condition("CredentialsReady")
    assert denied is not None
    assert denied.reason == "PolicyDenied"


async def test_a_denial_revokes_a_pat_minted_by_a_pass_that_ended_before_saying_so() -> None:
    """The pass that minted it stopped before the Secret and the status were written: the
    sandbox got past the policy once, so its denial still revokes."""
    sink = services(cache_with(labels={TENANT_LABEL: "acme"}))
    calls: list[str] = []

    async def revoke(
        namespace: str, name: str, uid: str, *, created_at: datetime | None = None
    ) -> Revocation:
        calls.append(name)
        return Revocation.REVOKED

    sink.credentials = SimpleNamespace(revoke=revoke)
    waiting = {"type": "CredentialsReady", "status": "Unknown", "reason": "Minting", "message": "m"}
    run = Run(
        {
            **BODY,
            "status": {"conditions": [{**waiting, "lastTransitionTime": "2026-11-23T11:00:00Z"}]},
        },
        NOW,
        CONDITIONS,
    )

    assert await enforce(sink, SANDBOX, run) is True
    assert calls == ["alice"]


async def test_a_withdrawal_forgets_what_the_stopped_pod_did_as_a_sleep_does() -> None:
    """Let in again (the policy loosened, no spec change), the sandbox starts afresh: a
    refusal count carried over read its new PAT's first refusal as a fresh PAT refused too,
    and no PAT was minted for it."""
    sink = services(cache_with(labels={TENANT_LABEL: "acme"}))

    async def revoke(
        namespace: str, name: str, uid: str, *, created_at: datetime | None = None
    ) -> Revocation:
        return Revocation.REVOKED

    sink.credentials = SimpleNamespace(revoke=revoke)
    ran = {
        **RUNNING,
        "validatedPodUID": "pod-1",
        "validatedPatID": 7,
        "cliAuthFailures": 2,
        "podFailures": 1,
    }
    run = Run({**BODY, "status": ran}, NOW, CONDITIONS)

    assert await enforce(sink, SANDBOX, run) is True

    status = run.status
    assert (status.credentials, status.validated_pat_id, status.cli_auth_failures) == (
        None,
        None,
        None,
    )
    assert (status.validated_pod_uid, status.pod_failures) == (None, None)


async def test_a_sandbox_the_policy_never_let_through_opens_no_database() -> None:
    sink = services(cache_with(labels={TENANT_LABEL: "acme"}))  # revoke would fail the test
    denied = {
        "type": "CredentialsReady",
        "status": "False",
        "reason": "PolicyDenied",
        "message": "m",
    }
    run = Run(
        {
            **BODY,
            "status": {"conditions": [{**denied, "lastTransitionTime": "2026-11-23T11:00:00Z"}]},
        },
        NOW,
        CONDITIONS,
    )

    assert await enforce(sink, SANDBOX, run) is True


def test_an_unreadable_policy_is_logged_with_what_is_wrong_in_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A node selector listing 257 values: the policy CRD refuses it now; one stored under an
    # older CRD makes the whole policy unreadable, and the log must say why.
    cache = cache_with(labels={}, spec={"nodeSelectors": {"pool": ["v"] * 257}})
    with caplog.at_level("WARNING", logger="craft_operator.reconciler.policy_step"):
        assert read_policy(cache).absent == UNREADABLE
    [record] = [r for r in caplog.records if "unreadable" in r.getMessage()]
    assert "spec.nodeSelectors.pool: List should have at most 256 items" in record.getMessage()


@pytest.mark.parametrize(
    "url", ["https://onyx.bücher.example", "https://onyx.example.com/a\u00a0b"]
)
def test_a_policy_stored_with_a_server_url_an_older_crd_admitted_is_read(url: str) -> None:
    # The CRDs before 2026-11-27 admitted any URL without RE2 white space ([\t\n\f\r ]);
    # the policy CRD admits only printable ASCII now. Unreadable, the whole policy would be
    # ignored and every sandbox limited to the operator's defaults after an upgrade.
    cache = cache_with(labels={}, spec={"serverURLs": [url]})
    read = read_policy(cache)
    assert read.absent is None
    assert read.spec.server_urls == [url]


class Kube:
    """Deletes whatever it is asked to, and says what."""

    def __init__(self) -> None:
        self.deleted: list[str] = []

    async def delete(self, kind: Any, namespace: str, name: str, *, uid: str | None = None) -> Any:
        self.deleted.append(name)
        return {}


class Revoking:
    async def revoke(
        self, namespace: str, name: str, uid: str, *, created_at: datetime | None = None
    ) -> Revocation:
        return Revocation.REVOKED


async def test_a_spec_denied_while_the_policy_is_missing_is_not_let_back_in_by_the_next_pass() -> (
    None
):
    owner = {"kind": "CraftSandbox", "name": "alice", "uid": "u-1", "controller": True}
    cache = cache_with(labels={})  # no policy object
    secret = {
        "metadata": {
            "name": "alice-credentials",
            "namespace": "team-a",
            "uid": "s-1",
            "labels": {"craft.onyx.app/sandbox": "alice"},
            "ownerReferences": [owner],
        }
    }
    cache.put("Secret", secret)
    sink = services(cache)
    sink.kube, sink.credentials = Kube(), Revoking()
    admitted = {"phase": "Ready", "observedGeneration": 1, "credentials": {"patId": 7}}
    first = Run({**BODY, "status": admitted}, NOW, CONDITIONS)  # now at generation 2

    assert await enforce(sink, SANDBOX, first) is True  # a changed spec is judged as new
    assert sink.kube.deleted == ["alice-credentials"]
    first.finish()
    # The next pass comes before the Secret's deletion does: nothing is left to excuse it.
    second = Run({**BODY, "status": dump_status(first.status)}, NOW, CONDITIONS)
    assert await enforce(sink, SANDBOX, second) is True


async def test_a_withdrawal_whose_revocation_failed_stays_one_when_the_policy_goes_missing() -> (
    None
):
    sink = services(cache_with(labels={}, spec={"images": []}))  # the image no longer allowed
    sink.credentials = FlakyRevocation()
    first = Run({**BODY, "status": RUNNING}, NOW, CONDITIONS)
    assert await enforce(sink, SANDBOX, first) is True
    first.finish()

    gone = services(cache_with(labels={}))  # then the policy object is pruned
    gone.credentials = Revoking()
    retry = Run({**BODY, "status": dump_status(first.status)}, NOW, CONDITIONS)
    assert await enforce(gone, SANDBOX, retry) is True


NO_POLICY = "there is no CraftSandboxPolicy default, so only the operator's defaults apply"


async def test_with_no_policy_object_a_refusal_says_there_is_none_and_only_the_defaults_apply() -> (
    None
):
    # make run installs none: "not allowed by the CraftSandboxPolicy" sent people looking
    # for one.
    body = {**BODY, "spec": {**BODY["spec"], "userLibrary": {"bucket": "onyx-user-files-eu"}}}
    run, sink = Run(body, NOW, CONDITIONS), services(cache_with(labels={}))
    sink.credentials = Revoking()

    assert await enforce(sink, parse_sandbox(body), run) is True

    denied = run.condition("CredentialsReady")
    assert denied is not None
    assert denied.reason == "PolicyDenied"
    assert (
        "spec.userLibrary.bucket onyx-user-files-eu is not allowed: "
        f"{NO_POLICY} (a policy lists more in spec.buckets)"
    ) in denied.message
    assert "spec.image registry.example.com/craft/sandbox:1 is not allowed: " in denied.message
    assert "by the CraftSandboxPolicy" not in denied.message


def test_with_a_policy_object_a_refusal_names_the_policy_field_to_list_it_in() -> None:
    violations = check(SANDBOX, cache_with(labels={}, spec={}), SETTINGS) or []
    assert [violation.message for violation in violations] == [
        "spec.image registry.example.com/craft/sandbox:1 is not allowed by the "
        "CraftSandboxPolicy (spec.images)"
    ]


def test_with_no_policy_object_a_prefix_refusal_says_only_onyxs_layout_applies() -> None:
    body = {**BODY, "spec": {"user": {"id": USER}, "userLibrary": {"prefix": "shared/"}}}
    (violation,) = check(parse_sandbox(body), cache_with(labels={}), SETTINGS) or []
    assert violation.message == (
        f"spec.userLibrary.prefix shared/ is not this user's library: leave it unset (it is "
        f"then public/knowledge/{USER}/user_library/); {NO_POLICY} (a policy lists other "
        "layouts in spec.libraryPrefixes)"
    )
