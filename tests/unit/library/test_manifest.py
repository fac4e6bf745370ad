"""The destination manifest journal: folding, torn lines, tampering, compaction."""

from __future__ import annotations

import pytest

from craft_operator.library.destination import change_set
from craft_operator.library.manifest import (
    COMPACTION_SLACK,
    HEADER,
    UNKNOWN,
    ManifestEntry,
    parse_manifest,
    render_final,
    render_manifest,
    render_pending,
)
from craft_operator.library.plan import S3Object, SyncPlan, plan_sync

pytestmark = [pytest.mark.unit]


def test_a_rendered_manifest_reads_back_the_same() -> None:
    entries = {"a.txt": ManifestEntry(3, '"x"'), "dir/b c.txt": ManifestEntry(0, '"y-2"')}

    manifest = parse_manifest(render_manifest(entries))

    assert manifest.entries == entries
    assert manifest.valid


def test_later_lines_override_earlier_ones() -> None:
    journal = (
        render_manifest({"a": ManifestEntry(1, "e1"), "b": ManifestEntry(2, "e2")})
        + render_pending(["a", "b"], with_header=False)
        + render_final({"a": ManifestEntry(5, "e5")}, ["b"])
    )

    assert parse_manifest(journal).entries == {"a": ManifestEntry(5, "e5")}


def test_paths_announced_but_never_finished_are_unknown() -> None:
    journal = render_manifest({"a": ManifestEntry(1, "e1")}) + render_pending(
        ["a", "new"], with_header=False
    )

    assert parse_manifest(journal).entries == {"a": UNKNOWN, "new": UNKNOWN}


def test_a_torn_last_line_is_ignored() -> None:
    journal = render_manifest({"a": ManifestEntry(1, "e1")}) + b"+\t9\te9\ta"

    assert parse_manifest(journal).entries == {"a": ManifestEntry(1, "e1")}


@pytest.mark.parametrize("data", [None, b"", b"garbage\n", b"+\t1\te\ta\n"])
def test_a_missing_or_foreign_manifest_is_empty_and_invalid(data: bytes | None) -> None:
    manifest = parse_manifest(data)

    assert manifest.entries == {}
    assert not manifest.valid
    assert manifest.needs_compaction


def test_tampered_lines_with_unsafe_paths_or_bad_sizes_are_dropped() -> None:
    journal = (
        HEADER + "\n+\t1\te\t../../etc/passwd\n+\t1\te\t/abs\n+\tx\te\tbad-size\n"
        "+\t1\te\tok\n?\t\t\ta//b\n*\t1\te\tunknown-op\n"
    ).encode()

    assert parse_manifest(journal).entries == {"ok": ManifestEntry(1, "e")}


@pytest.mark.parametrize("size", ["\u00b2", "\u0661", "1" * 5000, "+1", ""])
def test_a_size_int_would_refuse_drops_the_line_instead_of_failing_the_sync(size: str) -> None:
    journal = f"{HEADER}\n+\t{size}\te\tplanted\n+\t1\te\tok\n".encode()

    assert parse_manifest(journal).entries == {"ok": ManifestEntry(1, "e")}


def test_the_journal_is_compacted_once_it_outgrows_its_entries() -> None:
    listing = [S3Object(key=f"p/f{i}", size=1, etag="e") for i in range(10)]
    entries = {f"f{i}": ManifestEntry(1, "e") for i in range(10)}
    short = parse_manifest(render_manifest(entries))
    long_journal = (
        render_manifest(entries)
        + render_pending(["f0"] * (2 * COMPACTION_SLACK), with_header=False)
        + render_final({"f0": ManifestEntry(1, "e")}, [])
    )
    grown = parse_manifest(long_journal)
    changed = [*listing[1:], S3Object(key="p/f0", size=2, etag="new")]

    plan_short = plan_sync(changed, short.entries, prefix="p/")
    plan_grown = plan_sync(changed, grown.entries, prefix="p/")
    assert isinstance(plan_short, SyncPlan)
    assert isinstance(plan_grown, SyncPlan)

    appended = change_set(plan_short, short)
    assert not appended.replace_manifest
    assert appended.final == b"+\t2\tnew\tf0\n"
    compacted = change_set(plan_grown, grown)
    assert compacted.replace_manifest
    assert parse_manifest(compacted.final).entries == plan_grown.library


def test_a_journal_that_could_outgrow_what_is_read_of_it_is_compacted_first() -> None:
    """Past the read cap the next sync would take the operator's own manifest for a
    tampered one and copy the whole library again: it is compacted before it gets there."""
    listing = [S3Object(key=f"p/f{i}", size=1, etag="e") for i in range(10)]
    entries = {f"f{i}": ManifestEntry(1, "e") for i in range(10)}
    journal = parse_manifest(render_manifest(entries))
    changed = [*listing[1:], S3Object(key="p/f0", size=2, etag="new")]
    plan = plan_sync(changed, journal.entries, prefix="p/")
    assert isinstance(plan, SyncPlan)
    after = (journal.lines + 2) * len(b"+\t2\tnew\tf0\n")  # two more lines, none longer

    assert not change_set(plan, journal, cap=after).replace_manifest
    assert change_set(plan, journal, cap=after - 1).replace_manifest


def test_the_first_pending_lines_carry_the_header() -> None:
    plan = plan_sync([S3Object(key="p/a", size=1, etag="e")], {}, prefix="p/")
    assert isinstance(plan, SyncPlan)

    changes = change_set(plan, parse_manifest(None))

    assert changes.pending == f"{HEADER}\n?\t\t\ta\n".encode()
    assert changes.replace_manifest


def test_apply_batches_keep_deletions_first_and_each_argv_within_budget() -> None:
    from craft_operator.library.transfer import apply_batches

    deletes = [f"old-{index}" for index in range(5)]
    moves = [f"new-{index}" for index in range(5)]

    batches = apply_batches(deletes, moves, budget=60)

    assert [path for batch in batches for path in batch[0]] == deletes
    assert [path for batch in batches for path in batch[1]] == moves
    assert len(batches) > 1
    kinds = ["d" * bool(batch[0]) + "m" * bool(batch[1]) for batch in batches]
    assert "".join(kinds) == "".join(sorted("".join(kinds)))  # never a deletion after a move
    assert all(len("".join(d + m)) + 9 * len(d + m) <= 60 for d, m in batches)
    huge = apply_batches([], ["x" * 1000], budget=60)
    assert huge == [([], ["x" * 1000])]
