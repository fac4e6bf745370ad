"""The stand-in Onyx API (``craft_operator.devtools.onyx_api``) in a process of its own."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.s3 import free_port


@contextlib.contextmanager
def stand_in_onyx_api(database_url: str, log: Path) -> Iterator[str]:
    """Serve the stand-in Onyx API on ``database_url`` (so the PATs minted there
    authenticate) until the block ends; its URL, once it accepts connections."""
    port = free_port()
    with log.open("ab") as output:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "craft_operator.devtools.onyx_api",
                "--port",
                str(port),
                "--database-url",
                database_url,
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_listening(port, child)
        yield f"http://127.0.0.1:{port}"
    finally:
        child.terminate()
        child.wait(10)


def wait_until_listening(port: int, child: subprocess.Popen[bytes]) -> None:
    """Wait until something accepts connections on ``port`` (fail if ``child`` exits)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise AssertionError(f"the stand-in Onyx API exited with {child.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError("the stand-in Onyx API did not start listening")
