"""Specification of the lean login: the same connection as the ``kubernetes`` client's
login (``kopf.login_via_client``), without importing that client, or no answer at all."""

from __future__ import annotations

import base64
import logging
import os
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from craft_operator.kube import login
from craft_operator.kube.connection import (
    ClusterUnreachableError,
    auth_headers,
    discover_connection,
)

CA = b"-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n"
CERT = b"-----BEGIN CERTIFICATE-----\ncert\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nkey\n-----END PRIVATE KEY-----\n"


def b64(data: bytes) -> str:
    return base64.standard_b64encode(data).decode()


def write_kubeconfig(tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def effect(info: kopf.ConnectionInfo) -> tuple[object, ...]:
    """What a connection does: where it goes, how it authenticates, what TLS files it uses."""
    return (
        info.server,
        bool(info.insecure),
        auth_headers(info)["Authorization"].lower() if auth_headers(info) else None,
        read(info.ca_path),
        read(info.certificate_path),
        read(info.private_key_path),
    )


def by_client(monkeypatch: pytest.MonkeyPatch) -> kopf.ConnectionInfo:
    """The client's login; it reads ``KUBECONFIG`` once, when it is imported."""
    import kubernetes.config.kube_config

    location = os.environ.get("KUBECONFIG", "")
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", location)
    info = kopf.login_via_client(logger=logging.getLogger("test"), settings=kopf.OperatorSettings())
    assert info is not None
    return info


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "ca.crt").write_bytes(CA)
    (tmp_path / "tls.crt").write_bytes(CERT)
    (tmp_path / "tls.key").write_bytes(KEY)
    return tmp_path


KUBECONFIGS = {
    "token and CA file": ({"server": "https://k:6443", "certificate-authority": "ca.crt"},
                          {"token": "t0ken"}),
    "token and inline CA": ({"server": "https://k:6443", "certificate-authority-data": b64(CA)},
                            {"token": "t0ken"}),
    "client certificate files": ({"server": "https://k", "certificate-authority": "ca.crt"},
                                 {"client-certificate": "tls.crt", "client-key": "tls.key"}),
    "inline client certificate": ({"server": "https://k", "certificate-authority-data": b64(CA)},
                                  {"client-certificate-data": b64(CERT),
                                   "client-key-data": b64(KEY)}),
    "basic credentials": ({"server": "https://k", "insecure-skip-tls-verify": True},
                          {"username": "admin", "password": "secret"}),
    "plain http": ({"server": "http://127.0.0.1:8080"}, {"token": "operator"}),
}  # fmt: skip


@pytest.mark.parametrize("name", KUBECONFIGS)
def test_a_plain_kubeconfig_gives_what_the_client_gives(
    name: str, files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, user = KUBECONFIGS[name]
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(files, cluster, user)))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    lean = login.from_kubeconfig()

    assert lean is not None
    assert effect(lean) == effect(by_client(monkeypatch))


@pytest.mark.parametrize(
    "user",
    [{"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}},
     {"auth-provider": {"name": "oidc"}}, {"tokenFile": "/run/token"}],
)  # fmt: skip
def test_a_kubeconfig_that_needs_more_than_reading_is_left_to_the_client(
    user: dict[str, Any], files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_kubeconfig(files, {"server": "https://k"}, user)
    monkeypatch.setenv("KUBECONFIG", str(path))

    assert login.from_kubeconfig() is None


def test_several_kubeconfig_files_are_left_to_the_client(
    files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_kubeconfig(files, {"server": "https://k"}, {"token": "t"})
    monkeypatch.setenv("KUBECONFIG", f"{path}:{path}")

    assert login.from_kubeconfig() is None


def test_no_kubeconfig_is_no_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))

    assert login.from_kubeconfig() is None


CANARY = "canary-kube-bearer-token-9f8e7d"
BROKEN_KUBECONFIGS = {
    "unterminated-quote": f'users:\n- name: u\n  user:\n    token: "{CANARY}\n',
    "tab-indent": f"users:\n- name: u\n  user:\n\ttoken: {CANARY}\n",
    "bad-tag": f"users:\n- name: u\n  user:\n    token: !!int {CANARY}\n",
}


@pytest.mark.parametrize("text", BROKEN_KUBECONFIGS.values(), ids=BROKEN_KUBECONFIGS.keys())
def test_a_kubeconfig_that_is_not_valid_yaml_is_said_so_without_quoting_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """PyYAML's message quotes the lines around the problem: here, the token."""
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    monkeypatch.setenv("KUBECONFIG", str(path))

    with pytest.raises(login.KubeconfigError) as raised:
        login.from_kubeconfig()
    assert "not valid YAML" in str(raised.value)
    assert CANARY not in str(raised.value)
    with pytest.raises(ClusterUnreachableError) as unreachable:
        discover_connection()
    assert CANARY not in str(unreachable.value)
    assert str(path) in str(unreachable.value), "which file"


def test_in_a_cluster_the_service_account_is_read_as_the_client_reads_it(
    files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (files / "token").write_text("sa-token")
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    monkeypatch.setattr("kubernetes.config.incluster_config.SERVICE_TOKEN_FILENAME",
                        str(files / "token"))  # fmt: skip
    monkeypatch.setattr("kubernetes.config.incluster_config.SERVICE_CERT_FILENAME",
                        str(files / "ca.crt"))  # fmt: skip
    for key, value in environ.items():
        monkeypatch.setenv(key, value)

    lean = login.in_cluster(environ, account=files)

    assert lean is not None
    assert lean.server == "https://[fd00::1]:443"
    assert effect(lean) == effect(by_client(monkeypatch))


def test_outside_a_cluster_there_is_no_service_account(files: Path) -> None:
    (files / "token").write_text("sa-token")

    assert login.in_cluster({}, account=files) is None
    assert login.in_cluster({"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"},
                            account=files / "absent") is None  # fmt: skip


MALFORMED_SERVERS = {
    "https://10.0.0.1:99999": "has an invalid port (not a number from 1 to 65535)",
    "https://10.0.0.1:http": "has an invalid port (not a number from 1 to 65535)",
    "https://10.0.0.1:0": "has port 0 (not a number from 1 to 65535)",
    "https://[fd00::1": "has an invalid IPv6 address (give it in brackets: https://[::1]:6443)",
    "https://:6443": "names no host",
    "ftp://10.0.0.1": "has a scheme other than https:// or http://",
}


@pytest.mark.parametrize("server", MALFORMED_SERVERS)
def test_a_kubeconfig_server_the_client_cannot_use_is_said_so_before_any_request(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiohttp raised a ValueError (a traceback) at the first request."""
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path, {"server": server}, {})))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    with pytest.raises(ClusterUnreachableError) as raised:
        discover_connection()

    assert str(raised.value) == (
        f"the kubeconfig's API server URL {server} {MALFORMED_SERVERS[server]}: fix the kubeconfig"
    )


@pytest.mark.parametrize(
    "server",
    [
        "https://bob:s3cr3t@10.0.0.1:6443",
        "https://bob:s3/cr3t@10.0.0.1",
        "bob:s3cr3t@h:1",
        "bob:s3cr3t@h://x",
    ],
)
def test_a_kubeconfig_server_with_a_password_is_refused_without_showing_it(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiohttp cannot send the user's token and the URL's credentials together."""
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path, {"server": server}, {})))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    with pytest.raises(ClusterUnreachableError) as raised:
        discover_connection()

    assert "fix the kubeconfig" in str(raised.value)
    assert "…@" in str(raised.value)
    assert "cr3t" not in str(raised.value)


@pytest.mark.parametrize(
    "server", ["https://k", "http://127.0.0.1:8080", "https://[fd00::1]:6443/k8s/clusters/c-1"]
)
def test_a_usable_kubeconfig_server_is_taken_as_it_is(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path, {"server": server}, {})))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    assert discover_connection().server == server


def test_an_in_cluster_service_port_that_is_no_port_names_the_pod_s_variables(
    files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (files / "token").write_text("sa-token")
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "https"}
    read_service_account = login.in_cluster
    monkeypatch.setattr(login, "in_cluster", lambda: read_service_account(environ, files))

    with pytest.raises(ClusterUnreachableError) as raised:
        discover_connection()

    assert str(raised.value) == (
        "the in-cluster API server URL https://10.96.0.1:https has an invalid port (not a "
        "number from 1 to 65535): check the pod's KUBERNETES_SERVICE_HOST and "
        "KUBERNETES_SERVICE_PORT"
    )


def test_a_client_key_rotated_many_times_leaves_two_files_of_it_at_most(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubeconfig is read again every minute: each rotation of an inline key wrote a
    file (the private key, on disk until the process ended) and kept the key in memory."""
    monkeypatch.setattr(login, "_written", {})
    paths = []
    for rotation in range(6):
        key = KEY.replace(b"key", f"key-{rotation}".encode())
        user = {"client-certificate-data": b64(CERT), "client-key-data": b64(key)}
        path = write_kubeconfig(tmp_path, {"server": "https://k"}, user)
        monkeypatch.setenv("KUBECONFIG", str(path))
        info = login.from_kubeconfig()
        assert info is not None
        assert read(info.private_key_path) == key
        paths.append(info.private_key_path)

    assert len(set(paths)) == 6
    assert [Path(p).exists() for p in paths if p] == [False] * 4 + [True] * 2
    again = login.from_kubeconfig()  # the same data: the same file, no new one
    assert again is not None
    assert again.private_key_path == paths[-1]


@pytest.mark.parametrize(
    ("cluster", "user", "server"),
    [
        ({"certificate-authority-data": "Y2E="}, {}, "https://10.0.0.1:6443"),
        ({"insecure-skip-tls-verify": True}, {}, "https://10.0.0.1:6443"),
        ({}, {"token": "t0k3n"}, "https://10.0.0.1:6443"),
        ({}, {"username": "bob", "password": "pw"}, "https://10.0.0.1:6443"),
        ({}, {}, "http://10.0.0.1:6443"),
    ],
    ids=["a CA", "TLS unverified", "a token", "a password", "nothing to secure"],
)
def test_a_server_without_a_scheme_is_read_as_kubectl_does_but_credentials_never_go_in_clear(
    cluster: dict[str, Any],
    user: dict[str, Any],
    server: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kubeconfig = write_kubeconfig(tmp_path, {"server": "10.0.0.1:6443", **cluster}, user)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    assert discover_connection().server == server
