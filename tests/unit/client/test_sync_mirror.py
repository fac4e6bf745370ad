"""The synchronous client offers every operation of the asyncio one, with the same arguments."""

from __future__ import annotations

import inspect

from craft_operator.client import AsyncSandboxClient, SandboxClient


def operations(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") and name != "close"
    }


def test_the_sync_client_mirrors_the_async_one() -> None:
    asynchronous, synchronous = operations(AsyncSandboxClient), operations(SandboxClient)

    assert set(synchronous) == set(asynchronous)
    for name, signature in asynchronous.items():
        assert list(synchronous[name].parameters) == list(signature.parameters), name
        for parameter in signature.parameters.values():
            assert synchronous[name].parameters[parameter.name].default == parameter.default, name
