"""Which NetworkPolicies restrict a sandbox pod's egress, as Kubernetes reads them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from craft_operator.config import Settings
from craft_operator.kube.cache import ObjectCache
from craft_operator.reconciler.egress import (
    NETWORK_POLICY,
    REASON,
    UNVERIFIED,
    egress_policy,
    refusal,
    restricts_egress,
    waiting_on,
)

pytestmark = pytest.mark.unit

SANDBOX = {"app.kubernetes.io/name": "craft-sandbox", "app.kubernetes.io/component": "sandbox"}


def policy(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a", "resourceVersion": "1"}, "spec": spec}


def test_an_empty_pod_selector_selects_every_pod() -> None:
    assert restricts_egress(policy("deny", podSelector={}, policyTypes=["Egress"]), SANDBOX)


def test_policy_types_decide_and_without_them_only_egress_rules_count() -> None:
    assert not restricts_egress(policy("in", podSelector={}, policyTypes=["Ingress"]), SANDBOX)
    assert not restricts_egress(policy("implicit", podSelector={}), SANDBOX)
    assert restricts_egress(policy("rules", podSelector={}, egress=[{"to": []}]), SANDBOX)


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        ({"matchLabels": {"app.kubernetes.io/component": "sandbox"}}, True),
        ({"matchLabels": {"app.kubernetes.io/component": "library-sync"}}, False),
        ({"matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "In",
                                "values": ["sandbox", "x"]}]}, True),
        ({"matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "NotIn",
                                "values": ["sandbox"]}]}, False),
        ({"matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, False),
        # A selector that does not select the pod must not count for it (the pod would
        # start with no policy restricting its egress).
        ({"matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "In",
                                "values": ["library-sync"]}]}, False),
        ({"matchExpressions": [{"key": "app.kubernetes.io/component",
                                "operator": "DoesNotExist"}]}, False),
        # NotIn selects a pod without the key at all.
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["x"]}]}, True),
    ],
)  # fmt: skip
def test_label_selectors_are_evaluated_like_the_api_server(
    selector: dict[str, Any], selected: bool
) -> None:
    found = policy("p", podSelector=selector, policyTypes=["Egress"])
    assert restricts_egress(found, SANDBOX) is selected


def test_the_first_restricting_policy_by_name_is_named() -> None:
    policies = [
        policy("z-deny", podSelector={}, policyTypes=["Egress"]),
        policy("a-ingress", podSelector={}, policyTypes=["Ingress"]),
        policy("m-deny", podSelector={}, policyTypes=["Ingress", "Egress"]),
    ]
    assert egress_policy(policies, SANDBOX) == "m-deny"
    assert egress_policy(policies[1:2], SANDBOX) is None


def test_a_pod_is_refused_only_where_its_namespace_has_no_restricting_policy() -> None:
    cache = ObjectCache()
    cache.put(NETWORK_POLICY, policy("deny", podSelector={}, policyTypes=["Egress"]))
    settings = Settings(state_dir=Path("/nonexistent"))
    pod = {"metadata": {"namespace": "team-a", "labels": SANDBOX}}
    elsewhere = {"metadata": {"namespace": "team-b", "labels": SANDBOX}}

    assert refusal(cache, settings, pod) is None
    refused = refusal(cache, settings, elsewhere)
    assert refused is not None
    assert (refused.type, refused.status, refused.reason) == ("PodReady", "False", REASON)
    allowed = settings.model_copy(update={"allow_unrestricted_egress": True})
    assert refusal(cache, allowed, elsewhere) is None


def test_a_new_policy_wakes_every_sandbox_without_a_pod_not_only_those_already_refused() -> None:
    """The refusal may not be in the status yet when the policy arrives (a namespace applied
    together with its sandboxes); a sandbox whose pod runs has nothing to wait for."""

    def sandbox(name: str, reason: str | None = None) -> dict[str, Any]:
        conditions = [{"type": "PodReady", "status": "False", "reason": reason}] if reason else []
        meta = {"name": name, "namespace": "team-a", "resourceVersion": "1"}
        return {"metadata": meta, "status": {"conditions": conditions}}

    cache = ObjectCache()
    cache.put("CraftSandbox", sandbox("refused", REASON))
    cache.put("CraftSandbox", sandbox("just-created"))
    cache.put("CraftSandbox", sandbox("running", "PodReady"))
    cache.put(
        "Pod", {"metadata": {"name": "running", "namespace": "team-a", "resourceVersion": "1"}}
    )

    woken = waiting_on(cache, "team-a", "CraftSandbox", "Pod")

    assert sorted(woken) == [("team-a", "just-created"), ("team-a", "refused")]
    assert waiting_on(cache, "team-b", "CraftSandbox", "Pod") == []


@pytest.mark.parametrize("reason", [REASON, UNVERIFIED])
def test_a_new_policy_wakes_a_sandbox_whose_sync_job_waits_for_one_though_its_pod_runs(
    reason: str,
) -> None:
    """Job mode: the pod runs, the library's sync Job waits for a policy (UserLibrarySynced
    says why), and only the NetworkPolicy watch brings the sandbox back to start it."""
    conditions = [{"type": "UserLibrarySynced", "status": "False", "reason": reason}]
    meta = {"name": "syncing", "namespace": "team-a", "resourceVersion": "1"}
    cache = ObjectCache()
    cache.put("CraftSandbox", {"metadata": meta, "status": {"conditions": conditions}})
    cache.put("Pod", {"metadata": dict(meta)})

    assert waiting_on(cache, "team-a", "CraftSandbox", "Pod") == [("team-a", "syncing")]


DENY = policy("deny", podSelector={}, policyTypes=["Egress"], egress=[{"ports": [{"port": 53}]}])


@pytest.mark.parametrize(
    "allow_all",
    [
        [{}],
        [{"to": []}],
        [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}],
        [{"to": [{"ipBlock": {"cidr": "::/0"}}]}],
        [{"ports": [{"port": 53}]}, {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}],
        # The same, spelt otherwise (the API server keeps these as written).
        [{"to": [{"ipBlock": {"cidr": "::0/0"}}]}],
        [{"to": [{"ipBlock": {"cidr": "0:0:0:0:0:0:0:0/0"}}]}],
        [{"to": [{"ipBlock": {"cidr": "10.0.0.0/0"}}]}],
        [{"to": [{"ipBlock": {"cidr": "0.0.0.0/1"}}, {"ipBlock": {"cidr": "128.0.0.0/1"}}]}],
        [{"ports": [{"protocol": "TCP"}, {"protocol": "UDP"}]}],
        [
            {
                "ports": [
                    {"protocol": "TCP", "port": 1, "endPort": 1024},
                    {"protocol": "TCP", "port": 1025, "endPort": 65535},
                    {"protocol": "UDP", "port": 1, "endPort": 65535},
                ],
                "to": [{"ipBlock": {"cidr": "::/0"}}],
            }
        ],
    ],
)
def test_a_policy_that_lets_all_egress_out_undoes_the_deny_beside_it(
    allow_all: list[dict[str, Any]],
) -> None:
    """NetworkPolicies add up: one rule that allows every destination on every port lets
    the agent reach the metadata address and the API server whatever else is there."""
    opened = policy("allow-all", podSelector={}, policyTypes=["Egress"], egress=allow_all)

    assert egress_policy([opened], SANDBOX) is None
    assert egress_policy([DENY, opened], SANDBOX) is None


@pytest.mark.parametrize(
    "rules",
    [
        [
            {"ports": [{"protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]},
            {"ports": [{"protocol": "UDP"}], "to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]},
        ],
        [
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/1"}}]},
            {"to": [{"ipBlock": {"cidr": "128.0.0.0/1"}}]},
        ],
        [  # TCP's addresses in halves, UDP's whole: every address on every port of both
            {"ports": [{"protocol": "UDP"}], "to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]},
            {"ports": [{"protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "0.0.0.0/1"}}]},
            {"ports": [{"protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "128.0.0.0/1"}}]},
        ],
    ],
)
def test_rules_that_add_up_to_everything_let_all_egress_out_in_one_policy_or_two(
    rules: list[dict[str, Any]],
) -> None:
    together = policy("together", podSelector={}, policyTypes=["Egress"], egress=rules)
    first = policy("first", podSelector={}, policyTypes=["Egress"], egress=rules[:1])
    second = policy("second", podSelector={}, policyTypes=["Egress"], egress=rules[1:])

    assert egress_policy([DENY, together], SANDBOX) is None
    assert egress_policy([DENY, first, second], SANDBOX) is None
    assert egress_policy([DENY, first], SANDBOX) == "deny", "half of it restricts"


@pytest.mark.parametrize(
    "narrowed",
    [
        [{"ports": [{"port": 443}]}],  # every destination, but on one port
        [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}}]}],
        [{"to": [{"namespaceSelector": {}}]}],  # the cluster's pods, not the world
        [{"to": [{"ipBlock": {"cidr": "0.0.0.0/1"}}]}],  # half the addresses
        [{"ports": [{"protocol": "TCP"}]}],  # every TCP port, but no UDP
        [{"ports": [{"protocol": "TCP", "port": 2, "endPort": 65535}, {"protocol": "UDP"}]}],
        [{"ports": [{"port": "https"}, {"protocol": "UDP"}]}],  # a named port is one port
    ],
)
def test_a_policy_that_narrows_egress_counts_as_restricting(
    narrowed: list[dict[str, Any]],
) -> None:
    found = policy("narrow", podSelector={}, policyTypes=["Egress"], egress=narrowed)

    assert egress_policy([found], SANDBOX) == "narrow"


def test_while_the_network_policies_cannot_be_watched_no_pod_starts() -> None:
    """A policy deleted meanwhile would still be in the cache and count."""
    cache = ObjectCache()
    cache.put(NETWORK_POLICY, DENY)
    settings = Settings(state_dir=Path("/nonexistent"))
    pod = {"metadata": {"namespace": "team-a", "labels": SANDBOX}}

    cache.mark_stale(NETWORK_POLICY, "team-a", True)
    refused = refusal(cache, settings, pod)
    cache.mark_stale(NETWORK_POLICY, "team-a", False)

    assert refused is not None
    assert refused.reason == UNVERIFIED
    assert "cannot watch the NetworkPolicies of namespace team-a" in refused.message
    assert refusal(cache, settings, pod) is None
    cache.mark_stale(NETWORK_POLICY, None, True)  # the cluster-wide stream
    assert refusal(cache, settings, pod) is not None
