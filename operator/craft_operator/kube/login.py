"""Logging in as the ``kubernetes`` client would, without importing it (about 45 MiB).

In a cluster (the service account) and with a plain kubeconfig (a token, basic credentials
or client certificates, as files or inline data), the credentials are read here, with the
same result as :func:`kopf.login_via_client`. Anything else in a kubeconfig (an ``exec``
plugin, an auth provider, several files in ``KUBECONFIG``) returns ``None``: the caller
then logs in through the client, as before.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf
import yaml

from craft_operator.yaml_errors import yaml_problem

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: The kubeconfig fields read here; any other makes the caller use the client.
CLUSTER_FIELDS = {
    "server",
    "certificate-authority",
    "certificate-authority-data",
    "insecure-skip-tls-verify",
}
USER_FIELDS = {
    "token",
    "username",
    "password",
    "client-certificate",
    "client-certificate-data",
    "client-key",
    "client-key-data",
}
#: kopf's priority for the client's login (one login handler only: it does not matter).
PRIORITY = 10


class KubeconfigError(ValueError):
    """The kubeconfig cannot be read; the message never quotes it (it holds secrets)."""


def in_cluster(
    environ: Mapping[str, str] = os.environ, account: Path = SERVICE_ACCOUNT
) -> kopf.ConnectionInfo | None:
    """The service account's credentials, as ``kubernetes.config.load_incluster_config``
    reads them; ``None`` outside a cluster."""
    host = environ.get("KUBERNETES_SERVICE_HOST")
    port = environ.get("KUBERNETES_SERVICE_PORT")
    token_file, ca_file = account / "token", account / "ca.crt"
    if not host or not port or not token_file.is_file() or not ca_file.is_file():
        return None
    token = token_file.read_text()
    if not token or not ca_file.read_text():
        return None
    if ":" in host or "%" in host:
        host = f"[{host}]"
    return kopf.ConnectionInfo(
        server=f"https://{host}:{port}", ca_path=str(ca_file), scheme="bearer", token=token,
        priority=PRIORITY,
    )  # fmt: skip


def from_kubeconfig(environ: Mapping[str, str] = os.environ) -> kopf.ConnectionInfo | None:
    """The current context's credentials from a plain kubeconfig; ``None`` when there is
    none, or when it needs more than reading (the client then logs in)."""
    paths = environ.get("KUBECONFIG") or "~/.kube/config"
    if os.pathsep in paths:
        return None
    path = Path(paths).expanduser()
    if not path.is_file():
        return None
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        problem = yaml_problem(exc)
        raise KubeconfigError(f"the kubeconfig {path} is not valid YAML: {problem}") from None
    except ValueError:  # a tagged or date-like value that is no such thing (``!!int abc``)
        raise KubeconfigError(
            f"the kubeconfig {path} is not valid YAML: a value is not of its type"
        ) from None
    try:
        context = _named(config, "contexts", config["current-context"])["context"]
        cluster = _named(config, "clusters", context["cluster"])["cluster"]
        user = _named(config, "users", context["user"]).get("user") or {}
    except (KeyError, TypeError):
        return None  # the client explains a broken kubeconfig better
    if set(cluster) - CLUSTER_FIELDS or set(user) - USER_FIELDS or not cluster.get("server"):
        return None
    base = path.parent
    token, username = user.get("token"), user.get("username")
    return kopf.ConnectionInfo(
        server=cluster["server"],
        ca_path=_file(base, cluster, "certificate-authority"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        scheme="Bearer" if token else None,
        token=token,
        username=username if username and not token else None,
        password=user.get("password") if username and not token else None,
        certificate_path=_file(base, user, "client-certificate"),
        private_key_path=_file(base, user, "client-key"),
        priority=PRIORITY,
    )


def _named(config: Mapping[str, Any], section: str, name: str) -> dict[str, Any]:
    for item in config.get(section) or []:
        if item.get("name") == name:
            return dict(item)
    raise KeyError(name)


def _file(base: Path, fields: Mapping[str, Any], key: str) -> str | None:
    """The path of a file the kubeconfig names (relative to it), or of a temporary file
    holding its inline ``-data`` (base64), as the client writes one."""
    data = fields.get(f"{key}-data")
    if data:
        return _data_file(key, str(data))
    value = fields.get(key)
    return str(base / Path(value).expanduser()) if value else None


#: The temporary files written for each inline field, oldest first: (digest, path).
_written: dict[str, list[tuple[str, str]]] = {}
#: Files kept per field: the current one, and the one before (a session made from it may
#: still be connecting); older ones, from credentials rotated since, are removed.
KEPT_PER_FIELD = 2


def _data_file(field: str, data: str) -> str:
    """A private temporary file holding ``data`` decoded (once per data: a re-login
    writes no new file); a rotated key's older files are removed, the rest at exit."""
    digest = hashlib.sha256(data.encode()).hexdigest()
    files = _written.setdefault(field, [])
    for known, path in files:
        if known == digest:
            return path
    with tempfile.NamedTemporaryFile(delete=False, prefix="craft-kube-") as handle:
        handle.write(base64.standard_b64decode(data))
    files.append((digest, handle.name))
    while len(files) > KEPT_PER_FIELD:
        _, old = files.pop(0)
        _unlink(old)
    return handle.name


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


@atexit.register
def _remove_written() -> None:
    for files in _written.values():
        for _, path in files:
            _unlink(path)
