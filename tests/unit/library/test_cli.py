"""``craft-operator sync-user-library`` into a local directory, against moto over HTTP."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from craft_operator.cli import main
from tests.support.s3 import S3Server

from .conftest import Bucket

pytestmark = [pytest.mark.s3]


@pytest.fixture(autouse=True)
def clean_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("CRAFT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CRAFT_STATE_DIR", str(tmp_path / "state"))


def run(bucket: Bucket, server: S3Server, dest: Path, *extra: str) -> Result:
    args = [
        "sync-user-library",
        "--bucket",
        bucket.name,
        "--prefix",
        bucket.prefix,
        "--dest",
        str(dest),
        "--endpoint-url",
        server.url,
        *extra,
    ]
    return CliRunner().invoke(main, args, catch_exceptions=False)


def tree(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in root.rglob("*")
        if path.is_file() and ".craft-sync" not in path.relative_to(root).parts
    }


def test_syncs_into_a_directory_and_prints_one_summary_line(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path
) -> None:
    bucket.put("a.txt", b"alpha")
    bucket.put("dir/b.txt", b"beta")

    result = run(bucket, s3_server, tmp_path / "lib")

    assert result.exit_code == 0
    assert result.stdout.count("\n") == 1
    assert "copied 2, deleted 0, skipped 0 files; transferred 9 bytes" in result.stdout
    assert tree(tmp_path / "lib") == {"a.txt": b"alpha", "dir/b.txt": b"beta"}


def test_a_second_run_downloads_only_the_changed_file_and_deletes_removed_ones(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path
) -> None:
    bucket.put("same.txt", b"s" * 1000)
    bucket.put("changes.txt", b"old")
    bucket.put("goes.txt", b"g")
    run(bucket, s3_server, tmp_path / "lib")
    bucket.put("changes.txt", b"new content")
    bucket.delete("goes.txt")

    result = run(bucket, s3_server, tmp_path / "lib", "--json")

    summary = json.loads(result.stdout)
    assert (summary["copied"], summary["deleted"], summary["bytesTransferred"]) == (1, 1, 11)
    assert tree(tmp_path / "lib") == {"same.txt": b"s" * 1000, "changes.txt": b"new content"}


def test_deleting_a_removed_file_keeps_its_neighbours_and_files_the_sync_did_not_place(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path
) -> None:
    """In Job mode the sandbox writes into the same volume: what the agent saved beside the
    library's files, and the library's other files, survive a deletion next to them."""
    bucket.put("notes/stays.txt", b"s")
    bucket.put("notes/goes.txt", b"g")
    bucket.put("notes/deep/goes.md", b"g")
    lib = tmp_path / "lib"
    run(bucket, s3_server, lib)
    (lib / "notes" / "mine.txt").write_bytes(b"the agent's")
    (lib / "notes" / "deep" / "mine.md").write_bytes(b"the agent's too")
    bucket.delete("notes/goes.txt")
    bucket.delete("notes/deep/goes.md")

    result = run(bucket, s3_server, lib, "--json")

    assert json.loads(result.stdout)["deleted"] == 2
    assert tree(lib) == {
        "notes/stays.txt": b"s",
        "notes/mine.txt": b"the agent's",
        "notes/deep/mine.md": b"the agent's too",
    }


def test_json_lists_skipped_keys_with_reasons_and_excludes_apply(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path
) -> None:
    bucket.put("../../outside.txt", b"x")
    bucket.put("ok.txt", b"ok")
    bucket.put("scratch.tmp", b"t")
    bucket.put("off/deep/file.txt", b"d")

    result = run(
        bucket, s3_server, tmp_path / "lib", "--json", "--exclude", "*.tmp", "--disabled", "off"
    )

    summary = json.loads(result.stdout)
    assert summary["skippedKeys"] == [
        {"key": bucket.prefix + "../../outside.txt", "reason": "'.' or '..' segment"}
    ]
    assert (summary["copied"], summary["skipped"], summary["excluded"]) == (1, 1, 2)
    assert tree(tmp_path / "lib") == {"ok.txt": b"ok"}
    assert not (tmp_path / "outside.txt").exists()


def test_never_follows_a_symlink_planted_in_the_destination(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "victim.txt").write_bytes(b"precious")
    lib = tmp_path / "lib"
    bucket.put("docs/victim.txt", b"v1")
    run(bucket, s3_server, lib)
    # The sandbox (which shares the volume in Job mode) swaps a directory for a symlink.
    (lib / "docs" / "victim.txt").unlink()
    (lib / "docs").rmdir()
    (lib / "docs").symlink_to(elsewhere)
    bucket.put("docs/victim.txt", b"v2")
    bucket.put("docs/new.txt", b"n")

    result = run(bucket, s3_server, lib)

    assert result.exit_code == 0
    assert (elsewhere / "victim.txt").read_bytes() == b"precious"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["victim.txt"]
    assert not (lib / "docs").is_symlink()
    assert tree(lib) == {"docs/victim.txt": b"v2", "docs/new.txt": b"n"}


def test_a_missing_bucket_is_a_permanent_failure_with_one_line(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path
) -> None:
    bucket.name = "no-such-bucket"

    result = run(bucket, s3_server, tmp_path / "lib")

    assert result.exit_code == 3
    assert result.stderr.strip() == (
        "craft-operator sync-user-library: S3 bucket 'no-such-bucket' does not exist"
    )


def test_an_unreachable_s3_is_a_retryable_failure_and_writes_the_result_file(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path
) -> None:
    s3_server.stop()
    result_file = tmp_path / "termination-log"

    result = run(bucket, s3_server, tmp_path / "lib", "--result-file", str(result_file))

    s3_server.start()
    assert result.exit_code == 1
    assert "S3 is unreachable" in result.stderr
    assert "Traceback" not in result.output + result.stderr
    written = json.loads(result_file.read_text())
    assert (written["ok"], written["reason"], written["retryable"]) == (
        False,
        "S3Unavailable",
        True,
    )


def test_over_a_cap_nothing_is_written_and_the_exit_code_is_permanent(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path
) -> None:
    bucket.put("big.bin", b"b" * 100)
    bucket.put("small.txt", b"s")

    result = run(bucket, s3_server, tmp_path / "lib", "--max-file-bytes", "50")

    assert result.exit_code == 3
    assert "over the per-file cap of 50 bytes" in result.stderr
    assert not (tmp_path / "lib").exists()


def test_an_empty_library_still_creates_the_destination(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path
) -> None:
    result = run(bucket, s3_server, tmp_path / "new" / "lib")

    assert result.exit_code == 0
    assert (tmp_path / "new" / "lib").is_dir()


@pytest.mark.parametrize("objects", [0, 1], ids=["an empty library", "a library of one"])
def test_a_destination_under_a_regular_file_is_a_permanent_failure(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path, objects: int
) -> None:
    for index in range(objects):
        bucket.put(f"{index}.txt", b"x")
    (tmp_path / "file").write_text("x")

    result = run(bucket, s3_server, tmp_path / "file" / "lib")

    assert result.exit_code == 3
    assert f"cannot update {tmp_path / 'file' / 'lib'}: Not a directory" in result.stderr


def test_the_result_file_stays_within_a_termination_message(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path
) -> None:
    for index in range(120):
        bucket.put(f"../evil-{index:03}-{'x' * 40}", b"x")
    result_file = tmp_path / "termination-log"

    result = run(bucket, s3_server, tmp_path / "lib", "--result-file", str(result_file))

    assert result.exit_code == 0
    written = json.loads(result_file.read_text())
    assert len(result_file.read_bytes()) <= 4096
    assert written["skipped"] == 120
    assert written["skippedKeysTruncated"] is True


def test_a_file_can_become_a_directory_and_back(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path
) -> None:
    bucket.put("a", b"file a")
    bucket.put("x/y/z", b"deep")
    run(bucket, s3_server, tmp_path / "lib")
    bucket.delete("a")
    bucket.put("a/b", b"now a directory")
    bucket.delete("x/y/z")
    bucket.put("x", b"now a file")

    result = run(bucket, s3_server, tmp_path / "lib")

    assert result.exit_code == 0
    assert tree(tmp_path / "lib") == {"a/b": b"now a directory", "x": b"now a file"}


def test_a_manifest_replaced_by_a_symlink_is_neither_read_nor_written_through(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path
) -> None:
    lib = tmp_path / "lib"
    bucket.put("a.txt", b"a")
    run(bucket, s3_server, lib)
    target = tmp_path / "target"
    target.write_bytes(b"untouched")
    manifest = lib / ".craft-sync" / "manifest"
    manifest.unlink()
    manifest.symlink_to(target)
    bucket.put("b.txt", b"b")

    result = run(bucket, s3_server, lib, "--json")

    assert result.exit_code == 0
    assert json.loads(result.stdout)["copied"] == 2  # no trusted manifest: everything again
    assert target.read_bytes() == b"untouched"
    assert not manifest.is_symlink()


def test_the_sync_job_s_arguments_run_the_cli(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path
) -> None:
    from craft_operator.api.models import CraftSandbox
    from craft_operator.builders.library_job import build_sync_job
    from craft_operator.library import LibraryLocation, S3CredentialsSecret, SyncCaps

    box = CraftSandbox.model_validate(
        {
            "metadata": {"name": "alice", "namespace": "craft", "uid": "u"},
            "spec": {
                "user": {"id": "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"},
                "userLibrary": {"mode": "Job", "exclude": ["*.tmp"], "disabledPaths": ["off"]},
            },
        }
    )
    bucket.put("keep.txt", b"k")
    bucket.put("x.tmp", b"t")
    bucket.put("off/y", b"o")
    job = build_sync_job(
        box,
        image="operator:test",
        location=LibraryLocation(bucket.name, bucket.prefix, endpoint_url=s3_server.url),
        credentials=S3CredentialsSecret("s3"),
        sequence=1,
        caps=SyncCaps(),
    )
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    dest, result_file = tmp_path / "volume", tmp_path / "termination-log"
    args[args.index("--dest") + 1] = str(dest)
    args[args.index("--result-file") + 1] = str(result_file)

    result = CliRunner().invoke(main, args, catch_exceptions=False)

    assert result.exit_code == 0
    assert tree(dest) == {"keep.txt": b"k"}
    assert json.loads(result_file.read_text())["ok"] is True


def test_an_unexpected_error_still_writes_a_retryable_result_without_its_message(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def crash(**_: object) -> None:
        raise RuntimeError("aws_secret_access_key=CANARY-not-for-the-status")

    monkeypatch.setattr("craft_operator.cli.sync_user_library.sync_user_library_local", crash)
    result_file = tmp_path / "termination-log"

    result = run(bucket, s3_server, tmp_path / "lib", "--result-file", str(result_file))

    assert result.exit_code == 1
    written = json.loads(result_file.read_text())
    assert (written["ok"], written["reason"], written["retryable"]) == (False, "SyncFailed", True)
    assert "RuntimeError" in written["error"]
    assert "CANARY" not in result_file.read_text()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--bucket", "bad bucket", "--bucket: must be an S3 bucket name"),
        ("--endpoint-url", "notaurl", "--endpoint-url: must be an http:// or https:// URL"),
        ("--region", "eu west 1", "--region: must be an S3 region such as us-east-1"),
    ],
    ids=["bucket", "endpoint-url", "region"],
)
def test_a_malformed_bucket_endpoint_or_region_is_bad_usage_with_one_line(
    bucket: Bucket, s3_server: S3Server, tmp_path: Path, option: str, value: str, message: str
) -> None:
    options = {"--bucket": bucket.name, "--endpoint-url": s3_server.url, option: value}
    result_file = tmp_path / "termination-log"
    args = [
        "sync-user-library",
        "--prefix",
        bucket.prefix,
        "--dest",
        str(tmp_path / "lib"),
        "--result-file",
        str(result_file),
        *(part for pair in options.items() for part in pair),
    ]

    result = CliRunner().invoke(main, args, catch_exceptions=False)

    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"craft-operator sync-user-library: {message}")
    assert json.loads(result_file.read_text())["ok"] is False
    assert not (tmp_path / "lib").exists()
