"""The start-up access check: a served namespace without the operator's Role stops it, unless
that namespace is being deleted or does not exist (then it is said, and watched all the same:
it is served again once made with the Role)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from craft_operator import access
from craft_operator.kube.client import ApiError

pytestmark = pytest.mark.unit


class FakeApi:
    """Answers access reviews (allowed outside ``lacking``) and lists of namespaces."""

    lacking: frozenset[str] = frozenset()
    #: The namespaces that exist: name -> being deleted.
    namespaces: Mapping[str, bool] = {}
    namespaces_readable = True

    def __init__(self, **_: Any) -> None:
        pass

    def configure(self, info: Any) -> None:
        pass

    async def close(self) -> None:
        pass

    async def request(
        self, method: str, path: str, *, body: Any = None, params: Any = None
    ) -> dict[str, Any]:
        assert path == access.SSAR_PATH
        namespace = body["spec"]["resourceAttributes"].get("namespace")
        return {"status": {"allowed": namespace not in self.lacking}}

    async def list(
        self, kind: Any, namespace: str | None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        assert kind.plural == "namespaces"
        if not self.namespaces_readable:
            raise ApiError(403, "Forbidden", "namespaces is forbidden")
        # As a selector a server did not apply would: every namespace comes back.
        return [
            {"metadata": {"name": name, **({"deletionTimestamp": "x"} if doomed else {})}}
            for name, doomed in self.namespaces.items()
        ]


def check(
    monkeypatch: pytest.MonkeyPatch,
    served: list[str],
    template_namespace: str | None = None,
    **api: Any,
) -> access.AccessVerdict:
    fake = type("Api", (FakeApi,), api)
    monkeypatch.setattr(access, "KubeClient", fake)
    verdict = access.check_operator_access(
        None,  # type: ignore[arg-type]
        served,
        peering=False,
        template_namespace=template_namespace,
        operator_namespace="craft-system",
    )
    return asyncio.run(verdict)


def test_a_namespace_without_the_role_stops_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    verdict = check(
        monkeypatch, ["team-a"], lacking=frozenset({"team-a"}), namespaces={"team-a": False}
    )
    assert verdict.problem is not None
    assert "team-a" in verdict.problem
    assert (verdict.terminating, verdict.missing) == ((), ())


def test_a_namespace_being_deleted_without_its_role_is_no_reason_to_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    verdict = check(
        monkeypatch,
        ["team-a", "doomed"],
        lacking=frozenset({"doomed"}),
        namespaces={"team-a": False, "doomed": True},
    )
    assert verdict.problem is None
    assert verdict.terminating == ("doomed",)


def test_a_namespace_that_does_not_exist_is_no_reason_to_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Deleted (and left in CRAFT_NAMESPACES), or not made yet: one namespace must not keep
    the operator from the others, and it is served once made."""
    verdict = check(
        monkeypatch, ["team-a", "gone"], lacking=frozenset({"gone"}), namespaces={"team-a": False}
    )
    assert verdict.problem is None
    assert verdict.missing == ("gone",)


def test_only_the_namespace_named_counts_not_another_being_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    verdict = check(
        monkeypatch,
        ["team-a"],
        lacking=frozenset({"team-a"}),
        namespaces={"team-a": False, "other": True},
    )
    assert verdict.problem is not None
    assert verdict.terminating == ()


def test_namespaces_that_cannot_be_read_excuse_no_missing_role(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    verdict = check(
        monkeypatch, ["team-a"], lacking=frozenset({"team-a"}), namespaces_readable=False
    )
    assert verdict.problem is not None
    assert "team-a" in verdict.problem


def test_a_template_configmap_elsewhere_is_not_sent_to_the_base_manifests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """manifests/base grants its Role in the operator's namespace only: applying it cannot
    let the operator read a SKILL.md template kept in another namespace."""
    verdict = check(
        monkeypatch,
        ["team-a"],
        template_namespace="onyx",
        lacking=frozenset({"onyx"}),
        namespaces={"team-a": False, "onyx": False},
    )
    assert verdict.problem is not None
    assert "manifests/base grants nothing in onyx" in verdict.problem
    assert "kubectl apply -k manifests/base" not in verdict.problem
    assert "craft-system/craft-operator" in verdict.problem


def test_a_template_configmap_in_the_operators_namespace_needs_the_base_manifests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    verdict = check(
        monkeypatch,
        ["team-a"],
        template_namespace="craft-system",
        lacking=frozenset({"craft-system"}),
        namespaces={"team-a": False, "craft-system": False},
    )
    assert verdict.problem is not None
    assert "kubectl apply -k manifests/base" in verdict.problem
    assert "grants nothing" not in verdict.problem
