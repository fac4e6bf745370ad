"""Benchmark: user-library sync into a (local stand-in) sandbox pod over exec.

Starts moto's S3 server on 127.0.0.1 in its own process (so it does not share the GIL
with the sync being measured), uploads a library (default 1,000 files, 200 MB),
syncs it into a pod through the local exec double (real ``sh`` and ``tar``, the same argv
the operator sends to a real pod), then changes one file and syncs again. Prints the
first sync's duration and throughput, and the bytes the incremental sync sent next to the
bytes a full re-send (what Onyx does today) would take.

    .venv/bin/python bench/library_sync.py [--files 1000] [--megabytes 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from craft_operator.kube.exec_local import LocalExec
from craft_operator.library import S3ObjectStore, make_s3_client, sync_user_library_exec
from craft_operator.library.tarstream import TarMember, archive_size

PREFIX = "public/knowledge/00000000-0000-4000-8000-000000000000/user_library/"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"moto_server did not start on port {port}")


def mb(value: float) -> str:
    return f"{value / 1e6:,.1f} MB"


def main(files: int, megabytes: float) -> None:
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        asyncio.run(run(files, megabytes, port))
    finally:
        server.terminate()
        server.wait()


async def run(files: int, megabytes: float, port: int) -> None:
    client = make_s3_client(endpoint_url=f"http://127.0.0.1:{port}", region="us-east-1")
    client.create_bucket(Bucket="bench-library")
    size = int(megabytes * 1e6 / files)
    names = [f"dir-{index % 20:02}/file-{index:05}.bin" for index in range(files)]
    payload = os.urandom(size)

    def put(name: str) -> None:
        client.put_object(Bucket="bench-library", Key=PREFIX + name, Body=payload)

    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, names))
    print(
        f"library: {files} files of {size:,} bytes = {mb(files * size)} "
        f"(uploaded to moto in {time.perf_counter() - started:.1f}s)"
    )

    store = S3ObjectStore(client)
    try:
        await compare(client, store, files, size, names)
    finally:
        await store.close()


async def compare(
    client: Any, store: S3ObjectStore, files: int, size: int, names: list[str]
) -> None:
    """A first sync, an incremental one after one file changed, and one with no change."""
    with tempfile.TemporaryDirectory() as scratch:
        pods = LocalExec(root=Path(scratch))

        async def sync() -> tuple[float, int, int]:
            result = await sync_user_library_exec(
                store=store,
                bucket="bench-library",
                prefix=PREFIX,
                exec_transport=pods,
                namespace="bench",
                pod="sandbox",
                container="sandbox",
                timeout_seconds=600,
            )
            return result.duration_seconds, result.bytes_transferred, result.copied

        cpu = time.process_time()
        seconds, sent, copied = await sync()
        cpu = time.process_time() - cpu
        print(
            f"first sync: {copied} files, {mb(sent)} sent in {seconds:.2f}s "
            f"= {sent / seconds / 1e6:,.1f} MB/s (operator process CPU {cpu:.1f}s)"
        )

        changed = names[files // 2]
        client.put_object(Bucket="bench-library", Key=PREFIX + changed, Body=os.urandom(size))
        seconds, sent, copied = await sync()
        full = archive_size([TarMember(f"files/{name}", size) for name in names])
        print(
            f"incremental sync after one file changed: {copied} file, {sent:,} bytes sent "
            f"in {seconds:.2f}s"
        )
        print(
            f"  the changed file: {size:,} bytes; framing and manifest lines: {sent - size:,} bytes"
        )
        print(f"  a full re-send would be {full:,} bytes ({full / sent:,.0f}x more)")
        seconds, sent, copied = await sync()
        print(f"no-change sync: {copied} files, {sent} bytes sent in {seconds:.2f}s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000, help="number of files (1000)")
    parser.add_argument("--megabytes", type=float, default=200, help="library size in MB (200)")
    arguments = parser.parse_args()
    main(arguments.files, arguments.megabytes)
