"""Finding the API server and the credentials, as kubectl does."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp.web
import pytest

from craft_operator.client import (
    AsyncSandboxClient,
    ConfigurationError,
    Connection,
    RetryPolicy,
    UnreachableError,
    discover,
    from_kubeconfig,
    in_cluster,
)
from craft_operator.client.errors import Request
from craft_operator.client.transport import Transport
from craft_operator.devtools.pki import ensure_pki


def kubeconfig(path: Path, user: dict[str, object], **cluster: object) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://k8s.example:6443/", **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [
            {"name": "main", "context": {"cluster": "c", "user": "u"}},
            {"name": "other", "context": {"cluster": "c", "user": "nobody"}},
        ],
        "current-context": "main",
    }
    path.write_text(json.dumps(config))
    return path


def test_a_kubeconfig_with_a_token_and_inline_ca(tmp_path: Path) -> None:
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    path = kubeconfig(tmp_path / "config", {"token": "t0k"}, **{"certificate-authority-data": ca})

    connection = from_kubeconfig([path])

    assert connection.server == "https://k8s.example:6443"
    assert connection.authorization() == {"Authorization": "Bearer t0k"}
    assert connection.ca_data == "-----BEGIN CERTIFICATE-----\n"
    assert "main" in connection.source
    assert "t0k" not in repr(connection.source)


def test_a_token_file_is_read_and_relative_paths_follow_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file\n")
    path = kubeconfig(
        tmp_path / "config", {"tokenFile": "token"}, **{"certificate-authority": "ca.crt"}
    )

    connection = from_kubeconfig([path])

    assert connection.authorization() == {"Authorization": "Bearer from-file"}
    assert connection.ca_path == tmp_path / "ca.crt"


def test_client_certificates_from_inline_data_are_loaded(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path / "pki")
    user = {
        "client-certificate-data": base64.b64encode(pki.kubelet_cert.read_bytes()).decode(),
        "client-key-data": base64.b64encode(pki.kubelet_key.read_bytes()).decode(),
    }
    ca = {"certificate-authority": str(pki.ca_cert)}
    connection = from_kubeconfig([kubeconfig(tmp_path / "config", user, **ca)])

    context = connection.ssl_context()

    assert isinstance(context, ssl.SSLContext)
    assert connection.authorization() == {}


def test_the_context_can_be_chosen_and_a_missing_user_is_anonymous(tmp_path: Path) -> None:
    connection = from_kubeconfig([kubeconfig(tmp_path / "c", {"token": "x"})], context="other")
    assert connection.authorization() == {}


def test_kubeconfig_files_merge_the_first_current_context_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = kubeconfig(tmp_path / "first", {"token": "first"})
    second = tmp_path / "second"
    second.write_text(json.dumps({"current-context": "elsewhere", "contexts": []}))
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")

    assert discover().authorization() == {"Authorization": "Bearer first"}


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"exec": {"command": "aws"}}, "credential plugin"),
        ({"client-key-data": "%%%"}, "not valid base64"),
    ],
)
def test_unusable_kubeconfigs_say_why(
    tmp_path: Path, user: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        from_kubeconfig([kubeconfig(tmp_path / "config", user)])


def test_no_credentials_anywhere_says_what_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))

    with pytest.raises(ConfigurationError, match="set KUBECONFIG"):
        discover()


def test_in_cluster_uses_the_service_account_and_rereads_its_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("first")
    (tmp_path / "ca.crt").write_text("")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}

    connection = in_cluster(tmp_path, env)

    assert connection.server == "https://[fd00::1]:443"
    assert connection.ca_path == tmp_path / "ca.crt"
    assert connection.authorization() == {"Authorization": "Bearer first"}
    (tmp_path / "token").write_text("rotated")
    connection._token_read = (
        time.monotonic() - 3600,
        "first",
    )  # read long ago: the next request reads again
    assert connection.authorization() == {"Authorization": "Bearer rotated"}


def test_in_cluster_without_a_token_says_what_the_pod_needs(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigurationError, match="automountServiceAccountToken"):
        in_cluster(tmp_path, env)


def test_relative_paths_of_merged_kubeconfigs_follow_the_file_that_names_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = tmp_path / "a" / "config", tmp_path / "b" / "config"
    context = {"name": "c", "context": {"cluster": "k", "user": "u"}}
    cluster = {"server": "https://k8s.example:6443", "certificate-authority": "ca.crt"}
    first.write_text(
        json.dumps(
            {
                "current-context": "c",
                "contexts": [context],
                "clusters": [{"name": "k", "cluster": cluster}],
            }
        )
    )
    user = {"client-certificate": "admin.crt", "client-key": "admin.key", "tokenFile": "t"}
    second.write_text(json.dumps({"users": [{"name": "u", "user": user}]}))

    connection = from_kubeconfig([first, second])

    assert connection.ca_path == tmp_path / "a" / "ca.crt"
    assert connection.cert_path == tmp_path / "b" / "admin.crt"
    assert connection.key_path == tmp_path / "b" / "admin.key"
    assert connection.token_path == tmp_path / "b" / "t"


def test_insecure_skip_tls_verify_still_presents_the_client_certificate(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path / "pki")
    connection = Connection(
        server="https://127.0.0.1:6443",
        insecure=True,
        cert_data=pki.kubelet_client_cert.read_bytes(),
        key_data=pki.kubelet_client_key.read_bytes(),
    )

    context = connection.ssl_context()

    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_NONE
    assert context.check_hostname is False


async def test_a_client_certificate_reaches_a_server_that_is_not_verified(
    tmp_path: Path,
) -> None:
    pki = ensure_pki(tmp_path / "pki")
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca_cert))
    server_tls.load_cert_chain(pki.serving_cert, pki.serving_key)
    server_tls.verify_mode = ssl.CERT_REQUIRED  # the handshake fails without a client cert
    peers: list[object] = []

    async def sandbox(request: aiohttp.web.Request) -> aiohttp.web.Response:
        peers.append(request.transport.get_extra_info("peercert") if request.transport else None)
        return aiohttp.web.json_response({"metadata": {"name": "alice"}, "status": {}})

    app = aiohttp.web.Application()
    app.router.add_get("/{tail:.*}", sandbox)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls)
    await site.start()
    port = runner.addresses[0][1]
    connection = Connection(
        server=f"https://127.0.0.1:{port}",
        insecure=True,  # the serving certificate's CA is not given to the client
        cert_path=pki.kubelet_client_cert,
        key_path=pki.kubelet_client_key,
    )
    try:
        async with AsyncSandboxClient(connection, retry=RetryPolicy(attempts=1)) as client:
            await client.status("craft", "alice")
    finally:
        await runner.cleanup()

    assert len(peers) == 1
    assert peers[0], "the server saw the client certificate"


@pytest.mark.parametrize(
    ("material", "named"),
    [
        ({"client-certificate": "missing.crt", "client-key": "missing.key"}, "missing.crt"),
        ({"client-certificate-data": "SECRET-CERT", "client-key-data": "SECRET-KEY"}, "data"),
    ],
)
async def test_unloadable_tls_material_is_a_configuration_error_that_names_it_not_its_content(
    tmp_path: Path, material: dict[str, str], named: str
) -> None:
    user = {
        key: base64.b64encode(value.encode()).decode() if key.endswith("-data") else value
        for key, value in material.items()
    }
    connection = from_kubeconfig([kubeconfig(tmp_path / "config", user)])

    async with AsyncSandboxClient(connection, retry=RetryPolicy(attempts=1)) as client:
        with pytest.raises(ConfigurationError) as failure:
            await client.status("craft", "alice")

    message = str(failure.value)
    assert named in message
    assert "SECRET" not in message
    assert str(tmp_path / "config") in message


def test_a_ca_that_does_not_load_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("not a certificate")
    path = kubeconfig(tmp_path / "config", {"token": "t"}, **{"certificate-authority": "ca.crt"})

    with pytest.raises(ConfigurationError, match=r"the CA .*ca\.crt"):
        from_kubeconfig([path]).ssl_context()


# -- broken kubeconfigs: a ConfigurationError that names the file, never its content --------

SECRET = "sha256~SUPERSECRETTOKENVALUE0123456789"
HEAD = (
    "apiVersion: v1\ncurrent-context: c\n"
    "clusters: [{name: k, cluster: {server: 'https://h:6443'}}]\n"
    "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
)


@pytest.mark.parametrize(
    ("users", "where"),
    [
        pytest.param(f'users:\n- name: u\n  user:\n    token: "{SECRET}\n', "line 9", id="quote"),
        pytest.param(f"users:\n- name: u\n  user:\n    token: {SECRET}: x\n", "line 8", id="colon"),
    ],
)
def test_a_kubeconfig_that_is_not_yaml_says_where_without_quoting_it(
    tmp_path: Path, users: str, where: str
) -> None:
    path = tmp_path / "config"
    path.write_text(HEAD + users)

    with pytest.raises(ConfigurationError) as failure:
        from_kubeconfig([path])

    message = str(failure.value)
    assert str(path) in message
    assert f"{where}, column" in message
    assert "SUPERSECRET" not in message


@pytest.mark.parametrize("value", [f"!!int {SECRET}", "2001-13-01"])
def test_a_kubeconfig_value_that_is_not_of_its_type_is_a_configuration_error(
    tmp_path: Path, value: str
) -> None:
    path = tmp_path / "config"
    path.write_text(HEAD + f"users: [{{name: u, user: {{token: {value}}}}}]\n")

    with pytest.raises(ConfigurationError, match="a value is not of its type") as failure:
        from_kubeconfig([path])
    assert "SUPERSECRET" not in str(failure.value)


def test_a_kubeconfig_that_is_not_utf8_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_bytes(HEAD.encode() + b"users: [{name: u, user: {token: \xff\xfe}}]\n")

    with pytest.raises(ConfigurationError, match=re.escape(f"{path} is not valid YAML")):
        from_kubeconfig([path])


def test_a_token_file_that_is_not_utf8_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "token").write_bytes(b"\xff\xfe-" + SECRET.encode())
    connection = from_kubeconfig([kubeconfig(tmp_path / "config", {"tokenFile": "token"})])

    with pytest.raises(ConfigurationError, match=r"token file .*token .*is not UTF-8") as failure:
        connection.authorization()
    assert "SUPERSECRET" not in str(failure.value)


def test_certificate_authority_data_that_is_not_pem_text_is_a_configuration_error(
    tmp_path: Path,
) -> None:
    der = base64.b64encode(b"\x30\x82\x03\xff\xfe").decode()
    path = kubeconfig(tmp_path / "config", {"token": "t"}, **{"certificate-authority-data": der})

    with pytest.raises(ConfigurationError, match="cluster 'c': certificate-authority-data"):
        from_kubeconfig([path])


def test_a_server_without_a_scheme_is_https(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", {"token": "t"}, server="10.0.0.1:6443")

    assert from_kubeconfig([path]).server == "https://10.0.0.1:6443"


@pytest.mark.parametrize("server", ["ftp://k8s.example", "https://", "https://k8s.example:port"])
def test_a_server_that_is_not_an_http_url_is_a_configuration_error(
    tmp_path: Path, server: str
) -> None:
    path = kubeconfig(tmp_path / "config", {"token": "t"}, server=server)

    with pytest.raises(ConfigurationError, match="cluster 'c': its server is not an http"):
        from_kubeconfig([path])


def test_insecure_skip_tls_verify_as_a_string_is_refused_not_taken_as_true(
    tmp_path: Path,
) -> None:
    path = kubeconfig(tmp_path / "config", {"token": "t"}, **{"insecure-skip-tls-verify": "false"})

    with pytest.raises(ConfigurationError, match="insecure-skip-tls-verify is not true or false"):
        from_kubeconfig([path])


def test_a_user_that_is_not_a_mapping_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(HEAD + f"users: [{{name: u, user: {SECRET}}}]\n")

    with pytest.raises(ConfigurationError, match="the user of 'u' is not a mapping") as failure:
        from_kubeconfig([path])
    assert "SUPERSECRET" not in str(failure.value)


# -- the server's certificate ------------------------------------------------------------------


async def test_a_server_certificate_the_ca_does_not_sign_fails_at_once_naming_the_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pki, other = ensure_pki(tmp_path / "pki"), ensure_pki(tmp_path / "other")
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(pki.serving_cert, pki.serving_key)
    app = aiohttp.web.Application()
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls)
    await site.start()
    tries: list[str] = []
    original = Transport._once

    async def counted(self: Transport, method: str, *args: Any) -> dict[str, Any]:
        tries.append(method)
        return await original(self, method, *args)

    monkeypatch.setattr(Transport, "_once", counted)
    connection = Connection(
        server=f"https://127.0.0.1:{runner.addresses[0][1]}",
        ca_path=other.ca_cert,  # not the CA that signed the serving certificate
        source="kubeconfig k, context c",
    )
    try:
        async with AsyncSandboxClient(connection, retry=RetryPolicy(attempts=6)) as client:
            with pytest.raises(ConfigurationError) as failure:
                await client.status("craft", "alice")
    finally:
        await runner.cleanup()

    assert tries == ["GET"], "verification fails the same way every time: not retried"
    message = str(failure.value)
    assert "certificate at https://127.0.0.1:" in message
    assert f"could not be verified against the CA {other.ca_cert}" in message


async def test_a_password_in_the_server_url_is_never_printed(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", {}, server="http://admin:s3cr3t-pw@127.0.0.1:1")
    connection = from_kubeconfig([path])

    async with AsyncSandboxClient(connection, retry=RetryPolicy(attempts=1)) as client:
        with pytest.raises(UnreachableError) as caught:
            await client.get("craft", "alice")

    assert "s3cr3t-pw" not in str(caught.value)
    assert "at http://127.0.0.1:1 (kubeconfig" in str(caught.value)
    assert "s3cr3t-pw" not in repr(connection)


@pytest.mark.parametrize(
    ("user", "sent"),
    [
        ({}, "Basic " + base64.b64encode(b"ad min:p@ss").decode()),
        ({"token": "abc"}, "Bearer abc"),  # as Go's client: the token wins
    ],
)
async def test_credentials_in_the_server_url_are_sent_as_basic_auth_unless_there_is_a_token(
    tmp_path: Path, user: dict[str, object], sent: str
) -> None:
    seen: list[str | None] = []

    async def answer(request: aiohttp.web.Request) -> aiohttp.web.Response:
        seen.append(request.headers.get("Authorization"))
        return aiohttp.web.json_response({})

    async with serving(answer) as port:
        server = f"http://ad%20min:p%40ss@127.0.0.1:{port}"
        path = kubeconfig(tmp_path / "config", user, server=server)
        async with AsyncSandboxClient(from_kubeconfig([path])) as client:
            await client.status("craft", "alice")

    assert seen == [sent]


@contextlib.asynccontextmanager
async def serving(
    handler: Callable[[aiohttp.web.Request], Awaitable[aiohttp.web.StreamResponse]],
) -> AsyncIterator[int]:
    """A plain-HTTP server on localhost answering every GET with ``handler``; its port."""
    app = aiohttp.web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def test_an_inline_token_loses_the_whitespace_around_it_as_a_token_file_does(
    tmp_path: Path,
) -> None:
    path = kubeconfig(tmp_path / "config", {"token": "abc-token\n"})

    assert from_kubeconfig([path]).authorization() == {"Authorization": "Bearer abc-token"}


async def answer_empty(_: aiohttp.web.Request) -> aiohttp.web.Response:
    return aiohttp.web.json_response({})


async def test_a_token_that_cannot_be_sent_is_a_configuration_error_that_is_not_retried() -> None:
    retried: list[object] = []
    async with serving(answer_empty) as port:
        connection = Connection(
            server=f"http://127.0.0.1:{port}", token="abc-\ttoken\n", source="kubeconfig x"
        )
        transport = Transport(connection, retry=RetryPolicy(attempts=3, base_delay=0.01))
        try:
            with pytest.raises(ConfigurationError) as caught:
                await transport.request("GET", "/api", Request("get"), retried=retried)
        finally:
            await transport.close()

    assert retried == [], "the same header fails every time"
    message = str(caught.value)
    assert "cannot be sent as configured (kubeconfig x)" in message
    assert "not JSON" not in message
    assert "API server is up" not in message
    assert "abc-" not in message


async def test_a_watch_with_a_token_that_cannot_be_sent_is_a_configuration_error() -> None:
    async with serving(answer_empty) as port:
        connection = Connection(server=f"http://127.0.0.1:{port}", token="abc-token\n")
        transport = Transport(connection)
        events = transport.watch("/api", Request("watch"), {}, read_timeout=30)
        try:
            with pytest.raises(ConfigurationError, match="cannot be sent as configured"):
                await anext(events)
        finally:
            await events.aclose()
            await transport.close()
