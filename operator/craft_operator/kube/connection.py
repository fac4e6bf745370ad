"""Find the Kubernetes API server and check that it answers.

The operator runs against the in-cluster service account or the current kubeconfig context,
like kubectl. :func:`check_reachable` turns "no cluster" into one clear sentence before kopf
starts, instead of a retry loop or a traceback.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import ssl
from typing import Any

import aiohttp
import kopf
import yaml
import yarl

from craft_operator.kube import login
from craft_operator.yaml_errors import yaml_problem

logger = logging.getLogger(__name__)


class ClusterUnreachableError(Exception):
    """No Kubernetes API server can be found or reached; the message says why."""


def discover_connection() -> kopf.ConnectionInfo:
    """Credentials for the in-cluster service account, else the current kubeconfig context.

    Read without the ``kubernetes`` client when that suffices (:mod:`.login`), through it
    otherwise.
    """
    try:
        in_cluster = login.in_cluster()
        info = in_cluster or login.from_kubeconfig()
        if info is None:
            info = kopf.login_via_client(logger=logger, settings=kopf.OperatorSettings())
    except kopf.LoginError:
        info = None
    except Exception as exc:  # the client raises many types for a broken kubeconfig
        reason = _reason(exc)
        raise ClusterUnreachableError(f"cannot load Kubernetes credentials: {reason}") from None
    if info is None:
        raise ClusterUnreachableError(
            "no Kubernetes credentials found: not running in a cluster and no kubeconfig "
            "(set KUBECONFIG or run `kubectl config use-context`)"
        )
    info = with_default_scheme(info)
    check_server(info.server, in_cluster=in_cluster is not None)
    return info


def with_default_scheme(info: kopf.ConnectionInfo) -> kopf.ConnectionInfo:
    """``info`` with a server given without a scheme (``10.0.0.1:6443``) read as
    ``https://`` when the connection has TLS settings (a CA, a client certificate or
    ``insecure-skip-tls-verify``), as kubectl reads it, or credentials to send (a token, a
    password): kubectl would send those in clear text over ``http://``, the backend's
    client never does. Else ``http://``, as kubectl reads it."""
    if "://" in info.server:
        return info
    secured = (info.ca_path, info.ca_data, info.insecure, info.certificate_path)
    sent = (info.certificate_data, info.token, info.username, info.password)
    scheme = "https" if any((*secured, *sent)) else "http"
    return dataclasses.replace(info, server=f"{scheme}://{info.server}")


def check_server(server: str, *, in_cluster: bool = False) -> None:
    """Raise :class:`ClusterUnreachableError` unless ``server`` is a URL the API client can
    connect to: http or https, a host, a port from 1 to 65535 if any, and no
    ``user:password@`` (the kubeconfig's user holds the credentials).

    The message says what is wrong and where to fix it, without quoting a password; aiohttp
    would say it with a ``ValueError`` at the first request.
    """
    problem = _server_problem(server)
    if problem is None:
        return
    if in_cluster:
        source = "the in-cluster API server URL"
        remedy = "check the pod's KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT"
    else:
        source = "the kubeconfig's API server URL"
        remedy = "fix the kubeconfig"
    raise ClusterUnreachableError(f"{source} {_shown(server)} {problem}: {remedy}")


def _server_problem(server: str) -> str | None:
    """What makes ``server`` unusable as the API server's URL, if anything."""
    if "://" not in server:
        return "has no scheme (https:// or http://)"  # (discover_connection gives it one)
    try:
        url = yarl.URL(server)
        port = url.explicit_port
    except ValueError as exc:  # its message may quote the URL: name the part instead
        message = str(exc)
        if "port" in message.lower():
            return "has an invalid port (not a number from 1 to 65535)"
        if "IPv" in message:
            return "has an invalid IPv6 address (give it in brackets: https://[::1]:6443)"
        if "host is required" in message:
            return "names no host"
        return "is not a valid URL"
    if url.scheme not in ("https", "http"):
        return "has a scheme other than https:// or http://"
    if not url.host:
        return "names no host"
    if port == 0:
        return "has port 0 (not a number from 1 to 65535)"
    if url.raw_user is not None or url.raw_password is not None:
        return "carries credentials (user:password@), which belong in the kubeconfig's user"
    return None


def _shown(server: str) -> str:
    """``server`` as it can be shown: anything up to an ``@`` (``user:password``) elided."""
    _, at, tail = server.rpartition("@")
    if not at:
        return server
    scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", server)
    return f"{scheme.group() if scheme else ''}…@{tail}"


def _reason(exc: Exception) -> str:
    """Why the credentials could not be loaded, in one line, never quoting the kubeconfig:
    a YAML parser's message shows the lines around the problem (a token, a key)."""
    if isinstance(exc, login.KubeconfigError):
        return str(exc)  # already said without quoting it, and naming the file
    causes = (exc, exc.__cause__, None if exc.__suppress_context__ else exc.__context__)
    for cause in causes:
        if isinstance(cause, yaml.YAMLError):
            return f"the kubeconfig is not valid YAML: {yaml_problem(cause)}"
    # Other parsers explain over several lines (with a caret diagram): keep it to one.
    return " ".join(str(exc).split()) or type(exc).__name__


def ssl_context(info: kopf.ConnectionInfo) -> ssl.SSLContext | bool:
    """An SSL context that trusts the cluster's CA and presents its client certificate."""
    if info.insecure:
        return False
    ca_data = info.ca_data.decode() if isinstance(info.ca_data, bytes) else info.ca_data
    try:
        context = ssl.create_default_context(cafile=info.ca_path, cadata=ca_data)
    except (OSError, ValueError) as exc:
        where = (
            f"CA file {os.fsdecode(info.ca_path)}" if info.ca_path else "certificate-authority-data"
        )
        raise ClusterUnreachableError(
            f"cannot use the cluster's {where} ({_problem(exc)}): fix the kubeconfig"
        ) from None
    if info.certificate_path and info.private_key_path:
        try:
            context.load_cert_chain(info.certificate_path, info.private_key_path)
        except (OSError, ValueError) as exc:
            raise ClusterUnreachableError(
                f"cannot use the client certificate {os.fsdecode(info.certificate_path)} and "
                f"key {os.fsdecode(info.private_key_path)} ({_problem(exc)}): fix the kubeconfig"
            ) from None
    return context


def _problem(exc: BaseException) -> str:
    """What went wrong reading a certificate, never quoting what was read."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


def auth_headers(info: kopf.ConnectionInfo) -> dict[str, str]:
    """The Authorization header for the connection's token or basic credentials."""
    if info.token:
        return {"Authorization": f"{info.scheme or 'Bearer'} {info.token}"}
    if info.username and info.password:
        import base64

        pair = base64.b64encode(f"{info.username}:{info.password}".encode()).decode()
        return {"Authorization": f"Basic {pair}"}
    return {}


async def check_reachable(info: kopf.ConnectionInfo, limit: float = 10.0) -> dict[str, Any]:
    """Ask the API server for its version; raise :class:`ClusterUnreachableError` if it fails."""
    url = f"{info.server.rstrip('/')}/version"
    try:
        async with (
            aiohttp.ClientSession(
                headers=auth_headers(info),
                timeout=aiohttp.ClientTimeout(total=limit),
            ) as session,
            session.get(url, ssl=ssl_context(info)) as response,
        ):
            if response.status in (401, 403):
                raise ClusterUnreachableError(
                    f"the Kubernetes API server at {info.server} refused our credentials "
                    f"(HTTP {response.status})"
                )
            response.raise_for_status()
            version: dict[str, Any] = await response.json()
            return version
    except ClusterUnreachableError:
        raise
    except aiohttp.ClientConnectorError as exc:
        raise ClusterUnreachableError(
            f"cannot reach the Kubernetes API server at {info.server}: {exc.os_error}"
        ) from None
    except (TimeoutError, aiohttp.ClientError, OSError, ssl.SSLError) as exc:
        reason = str(exc) or type(exc).__name__
        raise ClusterUnreachableError(
            f"cannot reach the Kubernetes API server at {info.server}: {reason}"
        ) from None
