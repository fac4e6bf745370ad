"""Specification of the object cache: newest wins, deletions leave tombstones."""

from __future__ import annotations

from typing import Any

import pytest

from craft_operator.api.pool import LABEL_CLAIMED_FROM, LABEL_POOL
from craft_operator.kube.cache import TOMBSTONE_SECONDS, ObjectCache, OrderedIndex


def obj(
    name: str, version: str | None, namespace: str | None = "ns", **extra: Any
) -> dict[str, Any]:
    """An object with a resourceVersion (or none)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if version is not None:
        metadata["resourceVersion"] = version
    return {"metadata": metadata, **extra}


def test_an_unknown_object_is_none() -> None:
    assert ObjectCache().get("Pod", "ns", "a") is None


def test_a_put_object_can_be_read_back_by_kind_namespace_and_name() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "1", data="x"))
    assert cache.get("Pod", "ns", "a") == obj("a", "1", data="x")
    assert cache.get("Secret", "ns", "a") is None
    assert cache.get("Pod", "other", "a") is None
    assert len(cache) == 1


def test_cluster_scoped_objects_have_no_namespace() -> None:
    cache = ObjectCache()
    cache.put("Node", obj("n1", "1", namespace=None))
    assert cache.get("Node", None, "n1") is not None


def test_a_newer_version_replaces_an_older_one() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "5", v="old"))
    cache.put("Pod", obj("a", "6", v="new"))
    assert cache.get("Pod", "ns", "a") == obj("a", "6", v="new")


def test_an_older_version_never_overwrites_a_newer_one() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "10", v="new"))
    cache.put("Pod", obj("a", "9", v="old"))
    assert cache.get("Pod", "ns", "a") == obj("a", "10", v="new")


def test_versions_compare_as_numbers_not_strings() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "9", v="old"))
    cache.put("Pod", obj("a", "10", v="new"))
    assert cache.get("Pod", "ns", "a") == obj("a", "10", v="new")


def test_the_same_version_again_is_an_echo_and_not_news() -> None:
    # The operator puts what its writes return; the watch event of that write carries the
    # same resourceVersion and must not queue another pass.
    cache = ObjectCache()
    assert cache.put("Pod", obj("a", "3", v="first")) is True
    assert cache.put("Pod", obj("a", "3", v="first")) is False
    assert cache.get("Pod", "ns", "a") == obj("a", "3", v="first")


def test_a_newer_version_is_news_and_an_older_one_is_not() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "3"))
    assert cache.put("Pod", obj("a", "4")) is True
    assert cache.put("Pod", obj("a", "2")) is False


def test_non_numeric_versions_are_opaque_and_the_latest_put_wins() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "10", v="numeric"))
    cache.put("Pod", obj("a", "abc", v="opaque"))
    assert cache.get("Pod", "ns", "a") == obj("a", "abc", v="opaque")
    cache.put("Pod", obj("a", "2", v="numeric-again"))
    assert cache.get("Pod", "ns", "a") == obj("a", "2", v="numeric-again")


def test_objects_without_a_version_always_replace() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "10"))
    cache.put("Pod", obj("a", None, v="unversioned"))
    assert cache.get("Pod", "ns", "a") == obj("a", None, v="unversioned")


def test_the_cache_keeps_its_own_copy_of_the_top_level() -> None:
    cache = ObjectCache()
    source = obj("a", "1")
    cache.put("Pod", source)
    source["spec"] = "added later"
    cached = cache.get("Pod", "ns", "a")
    assert cached is not None
    assert "spec" not in cached


def test_remove_forgets_the_object() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "5"))
    cache.remove("Pod", obj("a", "6"))
    assert cache.get("Pod", "ns", "a") is None
    assert len(cache) == 0


def test_an_event_older_than_the_deletion_does_not_bring_the_object_back() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "5"))
    cache.remove("Pod", obj("a", "7"))
    cache.put("Pod", obj("a", "6"))
    assert cache.get("Pod", "ns", "a") is None


def test_a_tombstone_is_left_even_for_an_object_never_seen() -> None:
    cache = ObjectCache()
    cache.remove("Pod", obj("a", "7"))
    cache.put("Pod", obj("a", "3"))
    assert cache.get("Pod", "ns", "a") is None


def test_a_deletion_answer_of_the_deletions_version_does_not_bring_the_object_back() -> None:
    # The API server answers a DELETE with the object at the deletion's version, the
    # version its watch event carries too.
    cache = ObjectCache()
    cache.remove("Pod", obj("a", "7"))
    assert not cache.put("Pod", obj("a", "7"))
    assert cache.get("Pod", "ns", "a") is None


def test_an_object_read_at_its_tombstones_version_left_a_selector_and_is_taken_back() -> None:
    # A watch by label says DELETED, at the edit's version, for an object whose label was
    # edited away; a read of it then proves it is still there.
    cache = ObjectCache()
    cache.put("Pod", obj("a", "5"))
    cache.remove("Pod", obj("a", "7"))
    assert cache.put("Pod", obj("a", "7", v="unlabelled"), read=True)
    assert cache.get("Pod", "ns", "a") == obj("a", "7", v="unlabelled")


def test_a_read_older_than_a_deletion_does_not_bring_the_object_back() -> None:
    cache = ObjectCache()
    cache.remove("Pod", obj("a", "7"))
    assert not cache.put("Pod", obj("a", "6"), read=True)
    assert cache.get("Pod", "ns", "a") is None


def test_a_recreated_object_with_a_newer_version_is_accepted_after_a_deletion() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "5"))
    cache.remove("Pod", obj("a", "7"))
    cache.put("Pod", obj("a", "8", v="recreated"))
    assert cache.get("Pod", "ns", "a") == obj("a", "8", v="recreated")
    cache.put("Pod", obj("a", "6", v="stale"))
    assert cache.get("Pod", "ns", "a") == obj("a", "8", v="recreated")


def test_a_stale_deletion_does_not_remove_a_newer_object() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "9", v="recreated"))
    cache.remove("Pod", obj("a", "7"))
    assert cache.get("Pod", "ns", "a") == obj("a", "9", v="recreated")


def test_a_deletion_without_a_version_removes_and_leaves_no_tombstone() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "9"))
    cache.remove("Pod", obj("a", None))
    assert cache.get("Pod", "ns", "a") is None
    cache.put("Pod", obj("a", "1"))
    assert cache.get("Pod", "ns", "a") is not None


def test_forget_drops_the_object_and_its_tombstone() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "5"))
    cache.forget("Pod", "ns", "a")
    assert cache.get("Pod", "ns", "a") is None
    cache.remove("Pod", obj("a", "9"))
    cache.forget("Pod", "ns", "a")
    cache.put("Pod", obj("a", "2"))
    assert cache.get("Pod", "ns", "a") == obj("a", "2")


def test_items_lists_one_kind() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "1"))
    cache.put("Pod", obj("b", "1", namespace="other"))
    cache.put("Secret", obj("a", "1"))
    assert sorted(key for key, _ in cache.items("Pod")) == [
        ("Pod", "ns", "a"),
        ("Pod", "other", "b"),
    ]


def test_the_keys_of_one_kind_are_given_per_namespace_or_for_all() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "1"))
    cache.put("Pod", obj("b", "1", namespace="other"))
    cache.put("Secret", obj("c", "1"))
    cache.remove("Pod", obj("gone", "2"))
    assert cache.keys("Pod", "ns") == [("ns", "a")]
    assert cache.keys("Pod", "nowhere") == []
    assert sorted(cache.keys("Pod", None)) == [("ns", "a"), ("other", "b")]


def test_items_may_be_iterated_while_the_cache_changes() -> None:
    cache = ObjectCache()
    for name in "abc":
        cache.put("Pod", obj(name, "1"))
    for (_, namespace, name), _ in cache.items("Pod"):
        cache.forget("Pod", namespace, name)
    assert len(cache) == 0


def test_the_objects_of_one_kind_in_one_namespace_are_listed_as_they_come_and_go() -> None:
    cache = ObjectCache()
    cache.put("NetworkPolicy", obj("b", "1"))
    cache.put("NetworkPolicy", obj("a", "2"))
    cache.put("NetworkPolicy", obj("c", "3", namespace="other"))
    cache.put("Pod", obj("p", "4"))
    assert [o["metadata"]["name"] for o in cache.in_namespace("NetworkPolicy", "ns")] == ["a", "b"]

    cache.remove("NetworkPolicy", obj("a", "5"))
    cache.forget("NetworkPolicy", "ns", "b")
    assert cache.in_namespace("NetworkPolicy", "ns") == []
    assert len(cache.in_namespace("NetworkPolicy", "other")) == 1
    cache.clear()
    assert cache.in_namespace("NetworkPolicy", "other") == []


# -- the label index ---------------------------------------------------------------------


def labelled_pod(name: str, version: int, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": str(version),
            "labels": dict(labels),
        }
    }


def names_labelled(cache: ObjectCache, label: str, value: str) -> list[str]:
    return [obj["metadata"]["name"] for obj in cache.labelled("Pod", "ns", label, value)]


def test_the_pool_labels_are_indexed_and_follow_every_change() -> None:
    cache = ObjectCache()
    cache.put("Pod", labelled_pod("warm-b", 1, **{LABEL_POOL: "warm"}))
    cache.put("Pod", labelled_pod("warm-a", 2, **{LABEL_POOL: "warm"}))
    cache.put("Pod", labelled_pod("alice", 3))
    assert names_labelled(cache, LABEL_POOL, "warm") == ["warm-a", "warm-b"]
    # A claim moves the pod from one label to the other.
    cache.put("Pod", labelled_pod("warm-a", 4, **{LABEL_CLAIMED_FROM: "warm"}))
    assert names_labelled(cache, LABEL_POOL, "warm") == ["warm-b"]
    assert names_labelled(cache, LABEL_CLAIMED_FROM, "warm") == ["warm-a"]
    cache.remove("Pod", labelled_pod("warm-b", 5))
    assert names_labelled(cache, LABEL_POOL, "warm") == []
    cache.forget("Pod", "ns", "warm-a")
    assert names_labelled(cache, LABEL_CLAIMED_FROM, "warm") == []
    cache.put("Pod", labelled_pod("warm-c", 6, **{LABEL_POOL: "warm"}))
    cache.clear()
    assert names_labelled(cache, LABEL_POOL, "warm") == []


def test_an_older_version_does_not_move_the_index() -> None:
    cache = ObjectCache()
    cache.put("Pod", labelled_pod("warm-a", 5, **{LABEL_CLAIMED_FROM: "warm"}))
    cache.put("Pod", labelled_pod("warm-a", 4, **{LABEL_POOL: "warm"}))
    assert names_labelled(cache, LABEL_POOL, "warm") == []
    assert names_labelled(cache, LABEL_CLAIMED_FROM, "warm") == ["warm-a"]


def test_only_the_indexed_labels_can_be_asked_for() -> None:
    with pytest.raises(ValueError, match="does not index"):
        ObjectCache().labelled("Pod", "ns", "app.kubernetes.io/name", "x")


def test_tombstones_last_ten_minutes_then_go_so_deletions_never_pile_up() -> None:
    now = [0.0]
    cache = ObjectCache(clock=lambda: now[0])
    for index in range(1000):  # pool pods and sync Jobs: names that never come back
        cache.remove("Pod", obj(f"warm-{index}", str(10 + index)))
    now[0] = TOMBSTONE_SECONDS - 1
    cache.put("Pod", obj("warm-0", "3"))
    assert cache.get("Pod", "ns", "warm-0") is None, "an older event is still refused"

    now[0] = TOMBSTONE_SECONDS + 1
    cache.remove("Pod", obj("other", "2000"))

    assert len(cache._tombstones) == 1
    cache.put("Pod", obj("warm-0", "3"))
    assert cache.get("Pod", "ns", "warm-0") is not None


#: Secrets by their "team" label, ordered by their "rank".
BY_TEAM = OrderedIndex(
    "Secret",
    lambda o: (o["metadata"]["namespace"], o.get("team")) if o.get("team") else None,
    lambda o: str(o.get("rank", "")),
)


def test_an_ordered_index_keeps_each_group_in_order_as_objects_come_change_and_go() -> None:
    cache = ObjectCache()
    cache.put("Secret", obj("c", "1", team="red", rank="2"))
    cache.put("Secret", obj("a", "1", team="red", rank="3"))
    assert list(cache.ordered(BY_TEAM, ("ns", "red"))) == ["c", "a"], "built at the first read"
    cache.put("Secret", obj("b", "1", team="red", rank="2"))
    cache.put("Secret", obj("x", "1", team="blue", rank="1"))
    cache.put("Pod", obj("p", "1", team="red", rank="0"))
    assert list(cache.ordered(BY_TEAM, ("ns", "red"))) == ["b", "c", "a"], "then by name"
    cache.put("Secret", obj("a", "2", team="red", rank="1"))  # its place changes
    cache.put("Secret", obj("c", "2", team="blue", rank="2"))  # it changes group
    cache.put("Secret", obj("b", "2"))  # it leaves every group
    assert list(cache.ordered(BY_TEAM, ("ns", "red"))) == ["a"]
    assert list(cache.ordered(BY_TEAM, ("ns", "blue"))) == ["x", "c"]
    cache.remove("Secret", obj("x", "3"))
    cache.forget("Secret", "ns", "a")
    assert list(cache.ordered(BY_TEAM, ("ns", "red"))) == []
    assert list(cache.ordered(BY_TEAM, ("ns", "blue"))) == ["c"]
    cache.clear()
    assert list(cache.ordered(BY_TEAM, ("ns", "blue"))) == []
    cache.put("Secret", obj("d", "1", team="blue", rank="0"))
    assert list(cache.ordered(BY_TEAM, ("ns", "blue"))) == ["d"], "kept after a clear"


def test_an_older_version_does_not_move_an_ordered_index() -> None:
    cache = ObjectCache()
    cache.put("Secret", obj("a", "5", team="red", rank="1"))
    assert list(cache.ordered(BY_TEAM, ("ns", "red"))) == ["a"]
    cache.put("Secret", obj("a", "4", team="blue", rank="1"))
    assert list(cache.ordered(BY_TEAM, ("ns", "red"))) == ["a"]
    assert list(cache.ordered(BY_TEAM, ("ns", "blue"))) == []


def test_a_list_is_the_truth_about_what_was_cached_before_it_whatever_the_versions() -> None:
    # etcd restored from a backup: the list's versions are older than the cache's; an
    # object deleted since the backup is gone, a restored one is as the list has it.
    cache = ObjectCache()
    cache.put("Pod", obj("restored", "900", v="lost"))
    cache.put("Pod", obj("ghost", "950"))
    cache.list_begins("Pod", "ns")
    with cache.list_event("Pod", "ns"):
        assert cache.put("Pod", obj("restored", "390", v="backup"))
    with cache.list_event("Pod", "ns"):
        cache.remove("Pod", obj("ghost", "401"))
    cache.list_ends("Pod", "ns", "401")
    assert cache.get("Pod", "ns", "restored") == obj("restored", "390", v="backup")
    assert cache.get("Pod", "ns", "ghost") is None


def test_a_list_finding_an_object_at_its_cached_version_brings_no_news() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "5"))
    cache.list_begins("Pod", None)
    with cache.list_event("Pod", None):
        assert not cache.put("Pod", obj("a", "5"))


def test_what_is_written_while_a_list_is_under_way_keeps_the_ordering() -> None:
    # The operator's own writes, answered while the list is made, may be newer than it.
    cache = ObjectCache()
    cache.list_begins("Pod", "ns")
    cache.put("Pod", obj("patched", "9", v="new"))
    cache.put("Pod", obj("created", "10"))
    with cache.list_event("Pod", "ns"):
        cache.put("Pod", obj("patched", "5", v="listed"))
    with cache.list_event("Pod", "ns"):
        cache.remove("Pod", obj("created", "5"))
    cache.list_ends("Pod", "ns", "5")
    assert cache.get("Pod", "ns", "patched") == obj("patched", "9", v="new")
    assert cache.get("Pod", "ns", "created") is not None


def test_watch_events_after_a_list_keep_the_ordering() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "9", v="new"))
    cache.list_begins("Pod", "ns")
    cache.list_ends("Pod", "ns", "10")
    assert not cache.put("Pod", obj("a", "8", v="old"))
    cache.remove("Pod", obj("a", "7"))
    assert cache.get("Pod", "ns", "a") == obj("a", "9", v="new")


def test_only_the_list_s_own_events_replace_what_was_cached_before_it() -> None:
    # Another reader's older snapshot (the activation's relist pages at its own version)
    # met while the stream lists, before the list reached that object: no news.
    cache = ObjectCache()
    cache.put("CraftSandbox", obj("sb", "200", v="new"))
    cache.list_begins("CraftSandbox", None)
    assert not cache.put("CraftSandbox", obj("sb", "100", v="old"))
    assert cache.get("CraftSandbox", "ns", "sb") == obj("sb", "200", v="new")


def test_a_stale_copy_met_during_a_list_that_fails_does_not_bring_a_deleted_object_back() -> None:
    cache = ObjectCache()
    cache.remove("CraftSandbox", obj("gone", "300"))
    cache.list_begins("CraftSandbox", None)
    cache.put("CraftSandbox", obj("gone", "100"))
    cache.list_ends("CraftSandbox", None, None)  # a 410 on its continue token, say
    assert cache.get("CraftSandbox", "ns", "gone") is None


def test_removing_a_stale_copy_during_a_list_keeps_the_object_that_took_its_name() -> None:
    # A pod step drops the pod it knew after a uid-precondition conflict.
    cache = ObjectCache()
    cache.put("Pod", obj("p", "500", gen="successor"))
    cache.list_begins("Pod", "ns")
    cache.remove("Pod", obj("p", "100", gen="old"))
    assert cache.get("Pod", "ns", "p") == obj("p", "500", gen="successor")


def test_a_list_of_one_namespace_leaves_the_others_ordered() -> None:
    cache = ObjectCache()
    cache.put("Pod", obj("a", "9", namespace="other", v="new"))
    cache.list_begins("Pod", "ns")
    assert not cache.put("Pod", obj("a", "8", namespace="other", v="old"))


def test_a_name_deleted_after_a_list_s_version_may_be_made_anew_once_the_list_is_in() -> None:
    # Deleted at 1000 in the history etcd lost; the list says the server is at 401: the
    # pod made anew at 405 is no event older than that deletion.
    cache = ObjectCache()
    cache.remove("Pod", obj("sandbox-pod", "1000"))
    cache.remove("Pod", obj("deleted-before", "300"))
    cache.list_begins("Pod", "ns")
    cache.list_ends("Pod", "ns", "401")
    assert cache.put("Pod", obj("sandbox-pod", "405"))
    assert not cache.put("Pod", obj("deleted-before", "299"))


def test_a_failed_list_keeps_every_deletion() -> None:
    cache = ObjectCache()
    cache.remove("Pod", obj("a", "1000"))
    cache.list_begins("Pod", "ns")
    cache.list_ends("Pod", "ns", None)
    assert not cache.put("Pod", obj("a", "405"))
