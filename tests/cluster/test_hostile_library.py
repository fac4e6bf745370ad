"""Hostile sandbox pods against the library sync, at scale, on the real control plane.

Three pods fight the sync while 50 other sandboxes provision: one holds a 64 MiB,
ten-million-line manifest; in one every ``tar`` the sync starts is stopped (SIGSTOP), so it
never reads its stdin; in one every process the sync execs is stopped. The test plays the
agent from this machine: a pod's ``/workspace`` is ``<state>/pods/<uid>/workspace`` (its
library volume ``<state>/pods/<uid>/volumes/user-library``), and the processes podexec
starts for a pod are found in ``/proc`` by the pod's directory in their mount table.

The 50 must all become Ready, the operator's peak RSS must stay under the memory limit of
its StatefulSet, and each hostile sandbox must say what happened in ``UserLibrarySynced``.
``CRAFT_SCALE_BASELINE=1`` runs the same 50 without the hostile three (for the figures).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import Launch
from tests.cluster.test_user_library import REVISION, sandbox, status, upload
from tests.support.cluster import CRAFT, REPO, Cluster, wait_for

OTHERS = 50
BIG, STUCK_TAR, STOPPED = "big-manifest", "stuck-tar", "stopped-exec"
MANIFEST_LINES = 10_000_000
MANIFEST_BYTES = 64 * 1024 * 1024
EXEC_TIMEOUT = 20
#: The user of the two pods whose processes are stopped: revision 2 of their library brings
#: a file large enough that the upload runs long enough to be caught in the act.
STOPPED_USER = "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
STOPPED_PREFIX = f"public/knowledge/{STOPPED_USER}/user_library/"


def memory_limit() -> int:
    """The operator container's memory limit in manifests/base, in bytes."""
    documents = yaml.safe_load_all((REPO / "manifests/base/statefulset.yaml").read_text())
    statefulset = next(doc for doc in documents if doc and doc.get("kind") == "StatefulSet")
    limit = str(
        statefulset["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    )
    units = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}
    return int(limit[:-2]) * units[limit[-2:]] if limit[-2:] in units else int(limit)


def peak_rss(pid: int) -> int:
    """The process's peak resident set size (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def plant_manifest(library: Path) -> None:
    """A 64 MiB manifest of ten million lines, owned by the pod's user, as the agent would."""
    state = library / ".craft-sync"
    state.mkdir(exist_ok=True)
    manifest = state / "manifest"
    line = b'+\t1\t"e"\tf\n'[: MANIFEST_BYTES // MANIFEST_LINES]  # 6 bytes
    line = line[:-1] + b"\n"
    with manifest.open("wb") as out:
        out.write(b"craft-library-manifest 1\n")
        chunk = line * 100_000
        for _ in range(MANIFEST_LINES // 100_000 - 1):
            out.write(chunk)
        out.write(line * (100_000 - 2))
        out.write(b"x" * (MANIFEST_BYTES - out.tell() - 1) + b"\n")
    owner = library.stat()
    for path in (state, manifest):
        os.chown(path, owner.st_uid, owner.st_gid)
    assert manifest.stat().st_size == MANIFEST_BYTES
    assert manifest.read_bytes().count(b"\n") == MANIFEST_LINES


class Agent(threading.Thread):
    """Stops (SIGSTOP) processes that podexec runs for given pods: for each pod uid, those
    whose command name is in its set (empty: every one)."""

    def __init__(self, targets: dict[str, set[str]]) -> None:
        super().__init__(daemon=True)
        self.targets = targets
        self.stopped: dict[str, set[str]] = {uid: set() for uid in targets}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for pid in (p for p in os.listdir("/proc") if p.isdigit()):
                with contextlib.suppress(OSError):
                    comm = Path(f"/proc/{pid}/comm").read_text().strip()
                    if comm in ("podexec", "kube-apiserver", "etcd", "kwok"):
                        continue
                    mounts = Path(f"/proc/{pid}/mountinfo").read_text()
                    for uid, names in self.targets.items():
                        if f"/pods/{uid}/workspace" in mounts and (not names or comm in names):
                            os.kill(int(pid), signal.SIGSTOP)
                            self.stopped[uid].add(comm)
            time.sleep(0.05)


@contextlib.contextmanager
def agent(targets: dict[str, set[str]]) -> Iterator[Agent]:
    """The hostile agent, at work for the duration of the block."""
    thread = Agent(targets)
    thread.start()
    try:
        yield thread
    finally:
        thread.done.set()
        thread.join()


def ready_count(cluster: Cluster, namespace: str, names: list[str]) -> int:
    """How many of ``names`` are Ready."""
    sandboxes = cluster.list(f"{CRAFT}/craftsandboxes", namespace)
    wanted = set(names)
    return sum(
        1
        for item in sandboxes
        if item["metadata"]["name"] in wanted and (item.get("status") or {}).get("phase") == "Ready"
    )


def library_condition(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """The sandbox's ``UserLibrarySynced`` condition."""
    return cluster.condition(namespace, name, "UserLibrarySynced")


@pytest.mark.parametrize("hostile", [True, False], ids=["with-hostile-pods", "baseline"])
def test_hostile_pods_hold_one_sync_slot_each_while_50_sandboxes_become_ready(
    cluster: Cluster, namespace: str, launch: Launch, s3: Any, bucket: str, hostile: bool
) -> None:
    if not hostile and not os.environ.get("CRAFT_SCALE_BASELINE"):
        pytest.skip("the baseline runs with CRAFT_SCALE_BASELINE=1 (figures only)")
    upload(s3, bucket, {f"docs/file-{index}.md": os.urandom(50_000) for index in range(8)})
    operator = launch(CRAFT_LIBRARY_EXEC_TIMEOUT=str(EXEC_TIMEOUT))
    operator.start()
    sandboxes = f"{CRAFT}/craftsandboxes"
    hostiles = [BIG, STUCK_TAR, STOPPED] if hostile else []
    for name in hostiles:
        manifest = sandbox(name, "1")
        if name != BIG:
            manifest["spec"]["user"]["id"] = STOPPED_USER
        cluster.create(sandboxes, namespace, manifest)
    wait_for(
        lambda: ready_count(cluster, namespace, hostiles) == len(hostiles),
        within=300,
        what=lambda: f"the hostile three Ready (first sync)\n{operator.log_tail()}",
    )
    uids = {name: status(cluster, namespace, name)["podUID"] for name in hostiles}
    if hostile:
        plant_manifest(cluster.plane.pods_dir / uids[BIG] / "volumes" / "user-library")
    upload(s3, bucket, {"revision-2.md": b"new in revision 2\n"})
    s3.put_object(Bucket=bucket, Key=STOPPED_PREFIX + "big.bin", Body=os.urandom(30_000_000))
    targets = {uids[STUCK_TAR]: {"tar"}, uids[STOPPED]: set()} if hostile else {}

    with agent(targets) as attacker:
        started = time.monotonic()
        for name in hostiles:
            cluster.patch(
                sandboxes, namespace, name, {"metadata": {"annotations": {REVISION: "2"}}}
            )
        others = [f"tenant-{index:02d}" for index in range(OTHERS)]
        for name in others:
            cluster.create(sandboxes, namespace, sandbox(name, "2"))
        wait_for(
            lambda: ready_count(cluster, namespace, others) == OTHERS,
            within=900,
            interval=1.0,
            what=lambda: (
                f"{OTHERS} sandboxes Ready ({ready_count(cluster, namespace, others)} are)\n"
                f"{operator.log_tail()}"
            ),
        )
        elapsed = time.monotonic() - started
        print(f"\n{OTHERS} sandboxes Ready in {elapsed:.1f}s ({len(hostiles)} hostile pods)")
        if hostile:
            show = lambda: "; ".join(  # noqa: E731
                f"{name}: {library_condition(cluster, namespace, name)}" for name in hostiles
            )
            for name in (STUCK_TAR, STOPPED):
                wait_for(
                    lambda name=name: (
                        library_condition(cluster, namespace, name).get("reason") == "ExecTimedOut"
                    ),
                    within=6 * EXEC_TIMEOUT + 60,
                    what=lambda name=name: f"{name} ExecTimedOut: {show()}\n{attacker.stopped}",
                )
            big = wait_for(
                lambda: (
                    (c := library_condition(cluster, namespace, BIG)).get("reason")
                    == "ResyncedInFull"
                    and c
                ),
                within=120,
                what=lambda: f"{BIG} resynced: {show()}",
            )
        rss = peak_rss(operator.child.pid) if operator.child else 0

    print(f"operator peak RSS {rss / 2**20:.0f} MiB of {memory_limit() / 2**20:.0f} MiB")
    assert rss < memory_limit()
    if not hostile:
        return
    assert attacker.stopped[uids[STUCK_TAR]] == {"tar"}
    assert attacker.stopped[uids[STOPPED]]
    assert big["status"] == "True"
    assert "over 4194304 bytes" in big["message"]
    cluster.reasons_once_said(namespace, BIG, "LibraryManifestUntrusted")
    for name in (STUCK_TAR, STOPPED):
        condition = library_condition(cluster, namespace, name)
        assert condition["status"] == "False"
        # CRAFT_LIBRARY_EXEC_TIMEOUT (the upload: plus 1 s per MB), not the sync's 1,800 s.
        assert "did not finish within" in condition["message"]
        assert "1800" not in condition["message"]
        cluster.reasons_once_said(namespace, name, "LibraryExecTimedOut")
