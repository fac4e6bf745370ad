"""The synchronous client across a fork (Celery's prefork pool): a client made before the
fork gives the child an error that says what to do, not a call that never returns."""

from __future__ import annotations

import asyncio
import sys
import textwrap

from craft_operator.client import AsyncSandboxClient, Connection
from tests.unit.client.conftest import NAMESPACE, USER_ID

#: Made before the fork; the child calls it (killed by SIGALRM after 20 s if it hangs),
#: then the parent does. Prints what each got.
FORKED = textwrap.dedent(
    """
    import os, signal, sys
    from craft_operator.client import Connection, SandboxClient, SandboxClientError

    client = SandboxClient(Connection(server=sys.argv[1], insecure=True))
    child = os.fork()
    if child == 0:
        signal.alarm(20)
        try:
            client.status(sys.argv[2], "alice")
            print("child: answered", flush=True)
        except SandboxClientError as exc:
            print("child:", exc, flush=True)
        client.close()
        os._exit(0)
    _, status = os.waitpid(child, 0)
    print("child exit:", os.waitstatus_to_exitcode(status), flush=True)
    client.status(sys.argv[2], "alice")
    print("parent: answered", flush=True)
    client.close()
    """
)


async def test_a_client_made_before_a_fork_raises_in_the_child_and_works_on_in_the_parent(
    aclient: AsyncSandboxClient, connection: Connection
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-W",
        "ignore::DeprecationWarning",  # fork() in a process with threads: the point here
        "-c",
        FORKED,
        connection.server,
        NAMESPACE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    lines = stdout.decode().splitlines()

    assert process.returncode == 0, stderr.decode()
    assert lines[0].startswith("child: SandboxClient.status() was called in process")
    assert "Create the client after the fork" in lines[0]
    assert lines[1:] == ["child exit: 0", "parent: answered"]
