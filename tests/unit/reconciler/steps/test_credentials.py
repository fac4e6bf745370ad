"""CredentialsReady: a live PAT, said in the condition and the status, renewed in time."""

from __future__ import annotations

from datetime import timedelta

import pytest

from craft_operator.credentials.errors import DatabaseUnavailableError, UserNotFoundError
from craft_operator.reconciler.run import Revisit
from craft_operator.reconciler.sandbox import RetryLaterError, next_visit
from craft_operator.reconciler.step import Stop
from craft_operator.reconciler.steps import credentials
from tests.unit.reconciler.steps.conftest import CANARY, NOW, World

pytestmark = pytest.mark.unit


async def test_a_new_pat_is_reported_in_condition_status_and_event(world: World) -> None:
    p = world.pass_()
    assert await credentials.ensure_pat(p) is None
    condition = p.run.condition("CredentialsReady")
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "PATValid")
    assert p.run.status.credentials is not None
    assert p.run.status.credentials.pat_id == 1
    assert world.events.reasons == ["PATMinted"]
    assert p.issued is not None
    assert p.issued.pat_id == 1


async def test_a_reused_pat_posts_no_event(world: World) -> None:
    await credentials.ensure_pat(world.pass_())
    world.events.posted.clear()
    p = world.pass_()
    assert await credentials.ensure_pat(p) is None
    assert world.events.posted == []


async def test_a_reused_pat_is_counted_as_a_reuse_and_not_as_a_mint(world: World) -> None:
    registry = world.services.metrics.registry
    await credentials.ensure_pat(world.pass_())
    await credentials.ensure_pat(world.pass_())
    await credentials.ensure_pat(world.pass_())

    assert registry.get_sample_value("craft_pat_reuses_total") == 2
    mints = [
        sample.value
        for metric in registry.collect()
        if metric.name == "craft_pat_mints"
        for sample in metric.samples
        if sample.name == "craft_pat_mints_total"
    ]
    assert sum(mints) == 1


async def test_the_pass_comes_back_before_the_pat_must_be_renewed(world: World) -> None:
    world.credentials.lifetime = timedelta(hours=1)
    p = world.pass_(spec={"credentials": {"lifetime": "1h"}})
    await credentials.ensure_pat(p)
    fraction = world.services.settings.credential_renewal_fraction
    expected = 3600 - 3600 * fraction + 1
    assert p.run.verdict.after == pytest.approx(max(60.0, expected))


async def test_the_pass_comes_back_by_the_time_the_pat_is_read_again(world: World) -> None:
    """Whatever brought this pass, the next one reads the database in time: a PAT revoked
    out of band is noticed within CRAFT_RESYNC_INTERVAL."""
    world.credentials.recheck_at = NOW + timedelta(seconds=120)
    p = world.pass_()
    await credentials.ensure_pat(p)
    assert p.run.verdict.due == pytest.approx(120)
    assert next_visit(p.run.key, p.run.verdict, 300.0) == pytest.approx(120)


async def test_a_backing_off_pass_still_comes_back_by_the_time_the_pat_is_read_again(
    world: World,
) -> None:
    """A failing step's backoff (a broken custom template backs off every sandbox, and the
    queue's backoff grows to 5 minutes) does not put the PAT's next read off past it."""
    world.credentials.recheck_at = NOW + timedelta(seconds=120)
    p = world.pass_()
    await credentials.ensure_pat(p)
    p.run.revisit(backoff="TemplateFallback")

    with pytest.raises(RetryLaterError) as retry:
        next_visit(p.run.key, p.run.verdict, 300.0)

    assert retry.value.retry_by == pytest.approx(120)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (UserNotFoundError("no user 1111"), "UserNotFound"),
        (DatabaseUnavailableError("the database is down"), "DatabaseUnavailable"),
    ],
)
async def test_no_pat_stops_the_pass_with_a_reason_to_alert_on(
    world: World, error: Exception, reason: str
) -> None:
    world.credentials.error = error  # type: ignore[assignment]
    p = world.pass_()
    assert await credentials.ensure_pat(p) == Stop("WaitingForCredentials")
    condition = p.run.condition("CredentialsReady")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", reason)
    assert p.run.verdict == Revisit(backoff=reason)
    assert world.events.reasons == [reason]
    assert p.issued is None
    errors = world.services.metrics.registry.get_sample_value(
        "craft_pat_errors_total", {"reason": reason}
    )
    assert errors == 1, "CraftPATErrors reads it by reason"


async def test_the_token_is_never_in_the_status_or_events(world: World) -> None:
    p = world.pass_()
    await credentials.ensure_pat(p)
    assert CANARY not in p.run.status.model_dump_json()
    assert all(CANARY not in message for *_, message in world.events.posted)


REVOKED = {"craft.onyx.app/pat-revoked": "7"}
HELD = {"credentials": {"tokenDisplay": "onyx_pat_OLD...0000", "patId": 7}}


async def test_the_pat_minted_after_credentials_revoke_says_the_revocation_asked_for_it(
    world: World,
) -> None:
    world.credentials.mint_reason = "no credential stored"  # revoke deleted the row
    p = world.pass_(annotations=REVOKED, status=HELD)
    await credentials.ensure_pat(p)
    (_, _, message), *_ = world.events.posted
    reason = "a new PAT was requested after PAT 7 was revoked (craft.onyx.app/pat-revoked)"
    assert message.endswith(f"(id 1): {reason}")
    mints = world.services.metrics.registry.get_sample_value(
        "craft_pat_mints_total", {"reason": "requested"}
    )
    assert mints == 1


@pytest.mark.parametrize(
    "annotations",
    [{}, {"craft.onyx.app/pat-revoked": "6"}],
    ids=["not annotated", "an earlier PAT annotated"],
)
async def test_a_pat_minted_where_the_held_pat_is_no_longer_stored_replaces_it_and_is_not_new(
    world: World, annotations: dict[str, str]
) -> None:
    """``credentials revoke`` that could not reach the cluster deleted the row and wrote no
    annotation: the PAT minted at the next revisit replaces the revoked one."""
    world.credentials.mint_reason = "no credential stored"
    await credentials.ensure_pat(world.pass_(annotations=annotations, status=HELD))
    (_, _, message), *_ = world.events.posted
    assert "no credential stored" not in message
    assert message.endswith(
        "(id 1): PAT 7, which the sandbox held, is no longer stored: revoked by "
        "craft-operator credentials revoke, or its stored credential deleted"
    )
    mints = world.services.metrics.registry.get_sample_value
    assert mints("craft_pat_mints_total", {"reason": "revoked"}) == 1
    assert mints("craft_pat_mints_total", {"reason": "new"}) == 0


async def test_a_pat_minted_where_none_is_stored_nor_held_is_a_first_mint(world: World) -> None:
    world.credentials.mint_reason = "no credential stored"
    await credentials.ensure_pat(world.pass_(annotations=REVOKED, status={}))
    (_, _, message), *_ = world.events.posted
    assert message.endswith(": no credential stored")
    mints = world.services.metrics.registry.get_sample_value
    assert mints("craft_pat_mints_total", {"reason": "new"}) == 1
