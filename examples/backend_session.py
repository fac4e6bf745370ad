#!/usr/bin/env python3
"""The whole life of a Craft sandbox as the Onyx backend lives it, against whatever cluster
``KUBECONFIG`` points at (or the pod's service account):

    python examples/backend_session.py --namespace craft-sandboxes --user-id <Onyx user UUID>

1. ensure the CraftSandbox (server-side apply, field manager ``onyx-backend``);
2. wait until it is Ready, printing progress as the operator reports it;
3. touch it (the user is active);
4. upload a file to the user's library in S3 and notify the operator, waiting until the
   file is synced (``--bucket`` or ``S3_BUCKET``: the operator's ``CRAFT_S3_BUCKET``);
   without a bucket, only notify;
5. put it to sleep (its pod goes, its PAT stays), then wake it and wait until Ready again;
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

from craft_operator.client import Progress, SandboxClient, SandboxClientError

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
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for each wait")
    parser.add_argument("--keep", action="store_true", help="do not delete the sandbox")
    return parser.parse_args(argv)


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
    sandboxes.ensure(
        ns, name, user_id=args.user_id, tenant_id=args.tenant_id, sources=args.sources or ["slack"]
    )
    step("wait until Ready")
    started = time.monotonic()
    sandboxes.wait_ready(ns, name, timeout=args.timeout, on_progress=report)
    step(f"Ready in {time.monotonic() - started:.1f} s; pod {sandboxes.pod_name(ns, name)}")

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

    if args.keep:
        step(f"kept {ns}/{name}")
        return
    step("delete")
    sandboxes.delete(ns, name, wait=True, timeout=args.timeout)
    step(f"deleted {ns}/{name}")


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
