#!/usr/bin/env python3
"""The whole life of a Craft sandbox as the Onyx backend lives it, against whatever cluster
``KUBECONFIG`` points at (or the pod's service account):

    python examples/backend_session.py --namespace craft-sandboxes --user-id <Onyx user UUID>

1. ensure the CraftSandbox (server-side apply, field manager ``onyx-backend``) with a
   workspace: a volume at ``/workspace/sessions`` that survives sleep (``--workspace-size``,
   ``--storage-class``; the cluster's default storage class unless given);
2. wait until it is Ready, printing progress as the operator reports it;
3. touch it (the user is active);
4. upload a file to the user's library in S3 and notify the operator, waiting until the
   file is synced (``--bucket`` or ``S3_BUCKET``: the operator's ``CRAFT_S3_BUCKET``);
   without a bucket, only notify;
5. put it to sleep (its pod goes, its PAT and its workspace stay), then wake it, wait until
   Ready again and check that the new pod has the same workspace volume (the PVC's uid, as
   the status reports it: the backend needs no access to PVCs or exec for that);
6. delete it, waiting until the operator has revoked its PAT and it is gone (``--keep``
   leaves it).

The identity needs only ``manifests/backend`` (docs/onyx-backend.md). Exit status: 0 when
every step passed, 1 with a sentence saying what failed and what to do.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from craft_operator.client import (
    WORKSPACE_MOUNT,
    Progress,
    SandboxClient,
    SandboxClientError,
    Workspace,
)

DEFAULT_USER = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (defaults from the environment where it makes sense)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", default=os.environ.get("CRAFT_NAMESPACE", "craft-sandboxes"))
    parser.add_argument("--name", default="backend-example")
    parser.add_argument("--user-id", default=DEFAULT_USER)
    parser.add_argument("--tenant-id", default="public")
    parser.add_argument("--source", action="append", dest="sources", default=None)
    parser.add_argument("--bucket", default=os.environ.get("S3_BUCKET"))
    parser.add_argument("--s3-endpoint-url", default=os.environ.get("S3_ENDPOINT_URL"))
    parser.add_argument("--workspace-size", default="1Gi", help="size of the workspace volume")
    parser.add_argument("--storage-class", default=None, help="its storage class")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for each wait")
    parser.add_argument("--keep", action="store_true", help="do not delete the sandbox")
    return parser.parse_args(argv)


class WorkspaceLostError(SandboxClientError):
    """The pod after wake does not have the workspace it had before sleep."""


def step(text: str) -> None:
    """One line per step, flushed, so a pipe sees it at once."""
    print(f"==> {text}", flush=True)


def report(progress: Progress) -> None:
    """Progress as the operator reports it (the client calls this on every change)."""
    print(f"    {progress}", flush=True)


def upload(args: argparse.Namespace, key: str, body: bytes) -> None:
    """Put one file in the user's library, as Onyx's upload endpoint does."""
    import boto3  # the backend has it already; the client itself never imports it

    s3 = boto3.client("s3", endpoint_url=args.s3_endpoint_url)
    s3.put_object(Bucket=args.bucket, Key=key, Body=body)


def live(sandboxes: SandboxClient, args: argparse.Namespace) -> None:
    """Every step, in order."""
    ns, name = args.namespace, args.name
    step(f"ensure {ns}/{name} for user {args.user_id}")
    workspace = Workspace(size=args.workspace_size, storage_class_name=args.storage_class)
    sandboxes.ensure(
        ns,
        name,
        user_id=args.user_id,
        tenant_id=args.tenant_id,
        sources=args.sources or ["slack"],
        workspace=workspace,
    )
    step("wait until Ready")
    started = time.monotonic()
    sandboxes.wait_ready(ns, name, timeout=args.timeout, on_progress=report)
    step(f"Ready in {time.monotonic() - started:.1f} s; pod {sandboxes.pod_name(ns, name)}")

    before = workspace_volume(sandboxes, ns, name)
    step(f"workspace {before} mounted at {WORKSPACE_MOUNT}")

    step(f"touch: last activity {sandboxes.touch(ns, name).isoformat()}")

    if args.bucket:
        key = f"{args.tenant_id}/knowledge/{args.user_id}/user_library/example/hello.txt"
        upload(args, key, b"uploaded by examples/backend_session.py\n")
        step(f"uploaded s3://{args.bucket}/{key}; notify and wait for the sync")
        revision = sandboxes.notify_library_changed(ns, name, wait=True, timeout=args.timeout)
        library = sandboxes.status(ns, name).user_library
        files = library.files if library is not None else 0
        step(f"library synced at revision {revision}: {files} files in the sandbox")
    else:
        revision = sandboxes.notify_library_changed(ns, name)
        step(f"no bucket configured: notified revision {revision} only")

    step("sleep")
    sandboxes.sleep(ns, name, wait=True, timeout=args.timeout)
    step(f"asleep: phase {sandboxes.status(ns, name).phase}, no pod")
    step("wake")
    sandboxes.wake(ns, name, wait=True, timeout=args.timeout, on_progress=report)
    step(f"awake: pod {sandboxes.pod_name(ns, name)}")
    after = workspace_volume(sandboxes, ns, name)
    if after != before:
        raise WorkspaceLostError(f"the workspace was {before} before sleep, {after} after wake")
    step(f"the same workspace after wake: {after}")

    if args.keep:
        step(f"kept {ns}/{name}")
        return
    step("delete")
    sandboxes.delete(ns, name, wait=True, timeout=args.timeout)
    step(f"deleted {ns}/{name}")


def workspace_volume(sandboxes: SandboxClient, namespace: str, name: str) -> str:
    """The workspace's claim and the uid of that very volume claim, from the status."""
    reported = sandboxes.status(namespace, name).workspace
    if reported is None or not reported.claim_uid:
        raise WorkspaceLostError(f"{namespace}/{name} reports no workspace volume")
    return f"{reported.claim_name} (uid {reported.claim_uid})"


def main(argv: list[str] | None = None) -> int:
    """Run the session; 0 on success, 1 with the client's explanation."""
    args = arguments(argv)
    try:
        with SandboxClient() as sandboxes:
            live(sandboxes, args)
    except SandboxClientError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    step("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
