"""No sandbox pod without a NetworkPolicy that restricts its egress.

The agent in a sandbox runs arbitrary code; what keeps it from the cloud metadata address,
the API server and the rest of the network is a default-deny egress NetworkPolicy
(``manifests/sandbox-namespace``). Before creating a sandbox pod the reconciler asks
:func:`refusal`: in a namespace where no NetworkPolicy selects the pod with ``Egress`` in
its policy types, the pod is not started (unless ``CRAFT_ALLOW_UNRESTRICTED_EGRESS``) and
the sandbox's ``PodReady`` condition says why. The operator watches the NetworkPolicies of
the namespaces it serves, so the pod starts as soon as one appears (:func:`waiting_on`).

Which traffic a policy lets out is the platform's choice; the operator checks that some
policy restricts the egress of the pods it is about to start, and that none of the
policies selecting them lets all of it out (policies add up: one rule that allows every
destination on every port undoes the rest). It also refuses while its view of the
namespace's NetworkPolicies may be out of date (their watch fails, e.g. its Role lost
``list``/``watch`` on them): a policy deleted meanwhile would still count.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from craft_operator.api.status_codec import parse_status
from craft_operator.config import Settings
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.status import POD_READY, ConditionState

#: The cache kind of NetworkPolicies.
NETWORK_POLICY = kinds.NETWORK_POLICY.name
#: The PodReady reason of a sandbox whose pod waits for an egress policy.
REASON = "EgressNotRestricted"
#: The PodReady reason while the NetworkPolicies cannot be watched in the namespace.
UNVERIFIED = "EgressUnverified"


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = expression.get("key", ""), expression.get("operator")
    values = set(expression.get("values") or ())
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False  # an operator the API server would have refused


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a label selector selects ``labels`` (an empty selector selects every pod)."""
    selector = selector or {}
    match_labels = selector.get("matchLabels") or {}
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    return all(_expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def restricts_egress(policy: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether ``policy`` selects a pod with ``labels`` and governs its egress.

    As Kubernetes reads ``policyTypes``: when it is unset, a policy governs egress only
    if it has egress rules.
    """
    spec = policy.get("spec") or {}
    if not selects(spec.get("podSelector"), labels):
        return False
    types = spec.get("policyTypes")
    if types is None:
        return bool(spec.get("egress"))
    return "Egress" in types


def lets_everything_out(policies: Iterable[Mapping[str, Any]]) -> bool:
    """Whether the egress rules of ``policies``, which add up, allow every destination on
    every TCP and every UDP port, however it is spelt: a rule without peers, or for each
    protocol, address blocks without exceptions covering every address of a family
    (``0.0.0.0/0``, ``::0/0``, two halves, in one rule or several) on every port of it, or
    ports covering every port of it (in one rule or several) to every address. A rule set
    split by address and by port at once is not added up."""
    rules = [rule for policy in policies for rule in (policy.get("spec") or {}).get("egress") or []]
    return all(_lets_all_of(protocol, rules) for protocol in ("TCP", "UDP"))


def _lets_all_of(protocol: str, rules: Iterable[Mapping[str, Any]]) -> bool:
    """Whether ``rules`` let every destination out on every port of ``protocol``."""
    on_every_port: list[Mapping[str, Any]] = []  # the peers of rules on every port
    to_everywhere: list[tuple[int, int]] = []  # the ports of rules to every address
    for rule in rules:
        ports, peers = rule.get("ports") or [], rule.get("to") or []
        spans = _spans(ports, protocol)
        if _covers_all(spans):
            if not peers:
                return True
            on_every_port.extend(peers)
        if not peers or _every_address(peers):
            to_everywhere.extend(spans)
    return _every_address(on_every_port) or _covers_all(to_everywhere)


def _every_address(peers: Iterable[Mapping[str, Any]]) -> bool:
    """Whether the peers' address blocks (those without exceptions) cover every IPv4 or
    every IPv6 address."""
    v4: list[ipaddress.IPv4Network] = []
    v6: list[ipaddress.IPv6Network] = []
    for peer in peers:
        block = peer.get("ipBlock") or {}
        if block.get("except"):
            continue
        with contextlib.suppress(ValueError, TypeError):
            network = ipaddress.ip_network(str(block.get("cidr")), strict=False)
            if isinstance(network, ipaddress.IPv4Network):
                v4.append(network)
            else:
                v6.append(network)
    return any(n.prefixlen == 0 for n in ipaddress.collapse_addresses(v4)) or any(
        n.prefixlen == 0 for n in ipaddress.collapse_addresses(v6)
    )


def _spans(ports: Iterable[Mapping[str, Any]], protocol: str) -> list[tuple[int, int]]:
    """The port ranges of ``protocol`` a rule's ``ports`` let out (none given: all)."""
    spans: list[tuple[int, int]] = []
    given = False
    for entry in ports:
        given = True
        if str(entry.get("protocol") or "TCP") != protocol:
            continue
        port, end = entry.get("port"), entry.get("endPort")
        if port is None:
            spans.append((1, 65535))
        elif isinstance(port, int):
            spans.append((port, end if isinstance(end, int) and end >= port else port))
        # A named port is one port of the pod's: never all of them.
    return spans if given else [(1, 65535)]


def _covers_all(spans: list[tuple[int, int]]) -> bool:
    reached = 0
    for first, last in sorted(spans):
        if first > reached + 1:
            return False
        reached = max(reached, last)
    return reached >= 65535


def egress_policy(policies: Iterable[Mapping[str, Any]], labels: Mapping[str, str]) -> str | None:
    """The name of the first policy that restricts the egress of a pod with ``labels``, or
    ``None`` if none does, or if one that governs it lets all egress out (they add up)."""
    governing = [
        policy
        for policy in sorted(policies, key=lambda p: p.get("metadata", {}).get("name", ""))
        if restricts_egress(policy, labels)
    ]
    if not governing or lets_everything_out(governing):
        return None
    return str(governing[0]["metadata"]["name"])


def unrestricted(cache: ObjectCache, settings: Settings, pod: Mapping[str, Any]) -> bool:
    """Whether a pod like ``pod`` (its namespace and labels) would run with its egress
    unrestricted, and the settings do not allow it."""
    if settings.allow_unrestricted_egress:
        return False
    meta = pod.get("metadata") or {}
    if not cache.is_current(NETWORK_POLICY, meta.get("namespace")):
        return True  # what is cached may include a policy deleted since
    policies = cache.in_namespace(NETWORK_POLICY, meta.get("namespace"))
    return egress_policy(policies, meta.get("labels") or {}) is None


def refusal(
    cache: ObjectCache,
    settings: Settings,
    pod: Mapping[str, Any],
    *,
    condition: str = POD_READY,
    pods: str = "sandbox pods",
    starts: str = "the pod starts",
    manifest: str = "manifests/sandbox-namespace",
) -> ConditionState | None:
    """Why ``pod`` must not be created yet (a ``condition``, by default ``PodReady``), or
    ``None``. ``pods`` names what is held, ``starts`` what follows a policy, ``manifest``
    the policy to apply."""
    if not unrestricted(cache, settings, pod):
        return None
    namespace = (pod.get("metadata") or {}).get("namespace")
    if not cache.is_current(NETWORK_POLICY, namespace):
        return ConditionState.false(
            condition,
            UNVERIFIED,
            f"the operator cannot watch the NetworkPolicies of namespace {namespace} (its "
            "log says why; a 403 means its Role there lacks list/watch on networkpolicies, "
            f"compare with manifests/sandbox-namespace): no new {pods} until it sees again "
            "that one restricts their egress",
        )
    return ConditionState.false(
        condition,
        REASON,
        f"no NetworkPolicy in namespace {namespace} restricts the egress of {pods} (or "
        f"one that selects them lets all egress out): {starts} once one does (apply "
        f"{manifest} there), or set CRAFT_ALLOW_UNRESTRICTED_EGRESS=true to start them "
        "without one",
    )


def waiting_on(
    cache: ObjectCache, namespace: str, sandbox_kind: str, pod_kind: str
) -> list[tuple[str, str]]:
    """The sandboxes in ``namespace`` that may wait for an egress policy (their keys).

    Those whose status says so, and every one without a pod: its refusal may not be in the
    status yet (a namespace applied together with its sandboxes), and a pass that finds
    nothing to do costs no write.
    """
    waiting = []
    for body in cache.in_namespace(sandbox_kind, namespace):
        name = str(body["metadata"]["name"])
        # Its pod, or its library's sync Job (Job mode), waits for a policy.
        refused = any(
            condition.reason in (REASON, UNVERIFIED)
            for condition in parse_status(body.get("status"))[0].conditions
        )
        if refused or cache.get(pod_kind, namespace, name) is None:
            waiting.append((namespace, name))
    return waiting
