"""Where the API server is and how to prove who we are: in-cluster or a kubeconfig.

Like kubectl and client-go: an explicit kubeconfig wins, then ``$KUBECONFIG``, then the
in-cluster service account, then ``~/.kube/config``. Bearer tokens (inline or from a file,
re-read as the kubelet rotates it), client certificates (files or inline data) and the
cluster's CA (file or inline data) are supported; exec credential plugins are not.
"""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import tempfile
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from craft_operator.client.errors import ConfigurationError
from craft_operator.yaml_errors import yaml_problem

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: How long a token read from a file is used before it is read again (client-go: 1 minute).
TOKEN_REFRESH_SECONDS = 60.0


@dataclass
class Connection:
    """One API server and the credentials for it.

    A server URL with credentials in it (``https://user:password@host``) keeps them apart,
    in :attr:`userinfo`, so that :attr:`server` (shown in every error) never holds them;
    they are sent as basic auth when there is no token. With a token, the token is sent
    (kubectl, whose Go HTTP client adds the URL's first, would send those instead).
    """

    server: str
    token: str | None = field(default=None, repr=False)
    token_path: Path | None = None
    ca_path: Path | None = None
    ca_data: str | None = field(default=None, repr=False)
    cert_path: Path | None = None
    key_path: Path | None = None
    cert_data: bytes | None = field(default=None, repr=False)
    key_data: bytes | None = field(default=None, repr=False)
    insecure: bool = False
    #: Where this came from, for error messages (never a secret).
    source: str = ""
    #: The user name and password of the server URL, if it had them.
    userinfo: tuple[str, str] | None = field(default=None, repr=False)
    _token_read: tuple[float, str] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.server, userinfo = _split_userinfo(self.server)
        if userinfo is not None:
            self.userinfo = userinfo

    def authorization(self) -> dict[str, str]:
        """The Authorization header: the token's, else the server URL's user and password,
        else none."""
        token = self._current_token()
        if token:
            return {"Authorization": f"Bearer {token}"}
        if self.userinfo is not None:
            pair = ":".join(self.userinfo).encode()
            return {"Authorization": f"Basic {base64.b64encode(pair).decode('ascii')}"}
        return {}

    def _current_token(self) -> str | None:
        if self.token_path is None:
            return self.token
        now = time.monotonic()
        if self._token_read is None or now - self._token_read[0] > TOKEN_REFRESH_SECONDS:
            try:
                self._token_read = (now, self.token_path.read_text(encoding="utf-8").strip())
            except OSError as exc:
                raise ConfigurationError(
                    f"cannot read the token file {self.token_path} ({self.source}): {exc.strerror}"
                ) from None
            except UnicodeDecodeError:
                raise ConfigurationError(
                    f"the token file {self.token_path} ({self.source}) is not UTF-8 text"
                ) from None
        return self._token_read[1]

    def ca_description(self) -> str:
        """Which CAs verify the server, for messages: the file, the inline data, or the
        system's."""
        if self.ca_path:
            return f"the CA {self.ca_path}"
        if self.ca_data:
            return f"the CA data of {self.source}" if self.source else "the CA data"
        return "the system's CAs"

    def ssl_context(self) -> ssl.SSLContext:
        """TLS that trusts the cluster's CA and presents the client certificate, if any.

        With ``insecure`` (``insecure-skip-tls-verify``) the server is not verified, but a
        client certificate is still presented. A file that cannot be read or a certificate,
        key or CA that does not load is a :class:`ConfigurationError` naming where it came
        from (never its content).
        """
        if self.insecure:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            cafile = str(self.ca_path) if self.ca_path else None
            with self._loading(self.ca_description()):
                context = ssl.create_default_context(cafile=cafile, cadata=self.ca_data)
        if self.cert_path and self.key_path:
            with self._loading(f"the client certificate {self.cert_path} and key {self.key_path}"):
                context.load_cert_chain(self.cert_path, self.key_path)
        elif self.cert_data and self.key_data:
            with self._loading("the client certificate and key data"):
                _load_cert_data(context, self.cert_data, self.key_data)
        return context

    @contextlib.contextmanager
    def _loading(self, what: str) -> Iterator[None]:
        try:
            yield
        except (OSError, ssl.SSLError, ValueError, TypeError) as exc:
            # The OS's or OpenSSL's own words ("PEM lib", "no start line"), never text that
            # could quote what was read.
            why = exc.strerror if isinstance(exc, OSError) else None
            where = f" ({self.source})" if self.source else ""
            raise ConfigurationError(
                f"cannot load {what}{where}: {why or type(exc).__name__}"
            ) from None


def _load_cert_data(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``ssl`` loads certificates from files only: write them into a private (0700) directory
    for the moment it takes, and remove them."""
    with tempfile.TemporaryDirectory(prefix="craft-client-") as directory:
        cert_file, key_file = Path(directory, "cert.pem"), Path(directory, "key.pem")
        for path, data in ((cert_file, cert), (key_file, key)):
            path.touch(mode=0o600)
            path.write_bytes(data)
        context.load_cert_chain(cert_file, key_file)


def discover(kubeconfig: str | Path | None = None, context: str | None = None) -> Connection:
    """The connection kubectl would use: ``kubeconfig``, ``$KUBECONFIG``, in-cluster, then
    ``~/.kube/config``."""
    if kubeconfig is not None:
        return from_kubeconfig([Path(kubeconfig)], context)
    env = os.environ.get("KUBECONFIG")
    if env:
        return from_kubeconfig([Path(part) for part in env.split(os.pathsep) if part], context)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT / "token").exists():
        return in_cluster()
    default = Path.home() / ".kube" / "config"
    if default.exists():
        return from_kubeconfig([default], context)
    raise ConfigurationError(
        "no Kubernetes credentials: not running in a pod with a service account, no "
        "$KUBECONFIG and no ~/.kube/config (set KUBECONFIG, or pass kubeconfig=...)"
    )


def in_cluster(root: Path = SERVICE_ACCOUNT, environ: Mapping[str, str] = os.environ) -> Connection:
    """The pod's own service account (its token is re-read as the kubelet rotates it)."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigurationError(
            "not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set (use a kubeconfig)"
        )
    if not (root / "token").exists():
        raise ConfigurationError(
            f"no service account token at {root / 'token'}: the pod needs "
            "automountServiceAccountToken (or a projected token volume there)"
        )
    host = f"[{host}]" if ":" in host else host
    ca = root / "ca.crt"
    return Connection(
        server=f"https://{host}:{port}",
        token_path=root / "token",
        ca_path=ca if ca.exists() else None,
        source="in-cluster service account",
    )


def from_kubeconfig(paths: list[Path], context: str | None = None) -> Connection:
    """The connection of ``context`` (default: the current one) in the merged ``paths``.

    As kubectl: the first file to name something wins, and a relative path is relative to
    the file that holds it.
    """
    merged = _merge([_read(path) for path in paths if path.exists()])
    if merged is None:
        raise ConfigurationError(f"no kubeconfig at {os.pathsep.join(map(str, paths))}")
    name = context or merged.current_context
    if not name:
        raise ConfigurationError(
            f"{merged.origin}: no current-context (kubectl config use-context)"
        )
    ctx_entry, ctx_origin = merged.named("contexts", name, merged.origin)
    ctx = _section(ctx_entry, "context", ctx_origin)
    cluster_entry, cluster_origin = merged.named("clusters", ctx.get("cluster"), ctx_origin)
    cluster = _section(cluster_entry, "cluster", cluster_origin)
    user_entry, user_origin = merged.named("users", ctx.get("user"), ctx_origin, required=False)
    user = _section(user_entry, "user", user_origin)
    cluster_name = ctx.get("cluster")
    if not cluster.get("server"):
        raise ConfigurationError(f"{cluster_origin}: cluster {cluster_name!r} has no server")
    if "exec" in user or "auth-provider" in user:
        raise ConfigurationError(
            f"{user_origin}: user {ctx.get('user')!r} uses a credential plugin, which this "
            "client does not run; use a kubeconfig with a token or client certificate (e.g. "
            "kubectl create token <service-account>)"
        )
    cluster_dir, user_dir = Path(cluster_origin).parent, Path(user_origin).parent
    where = f"{cluster_origin}: cluster {cluster_name!r}"
    return Connection(
        server=_server_url(cluster["server"], where),
        token=_inline_token(user.get("token")),
        token_path=_path(user_dir, user.get("tokenFile")),
        ca_path=_path(cluster_dir, cluster.get("certificate-authority")),
        ca_data=_pem(cluster.get("certificate-authority-data"), where),
        cert_path=_path(user_dir, user.get("client-certificate")),
        key_path=_path(user_dir, user.get("client-key")),
        cert_data=_decoded(
            user.get("client-certificate-data"), user_origin, "client-certificate-data"
        ),
        key_data=_decoded(user.get("client-key-data"), user_origin, "client-key-data"),
        insecure=_flag(cluster.get("insecure-skip-tls-verify"), where),
        source=f"kubeconfig {merged.origin}, context {name}",
    )


def _read(path: Path) -> tuple[dict[str, Any], str]:
    try:
        loaded = yaml.safe_load(path.read_bytes()) or {}
    except OSError as exc:
        raise ConfigurationError(f"cannot read the kubeconfig {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigurationError(
            f"the kubeconfig {path} is not valid YAML: {yaml_problem(exc)}"
        ) from None
    except ValueError:  # a tagged or date-like value that is no such thing (``!!int abc``)
        raise ConfigurationError(
            f"the kubeconfig {path} is not valid YAML: a value is not of its type"
        ) from None
    if not isinstance(loaded, dict):
        raise ConfigurationError(f"the kubeconfig {path} is not a mapping")
    return loaded, str(path)


def _section(entry: Mapping[str, Any], key: str, origin: str) -> dict[str, Any]:
    """An entry's ``cluster``, ``context`` or ``user`` mapping (empty if absent)."""
    section = entry.get(key) or {}
    if not isinstance(section, dict):
        raise ConfigurationError(f"{origin}: the {key} of {entry.get('name')!r} is not a mapping")
    return section


def _server_url(value: object, where: str) -> str:
    """The cluster's server as an http(s) URL. A bare ``host:port`` means https: client-go
    guesses http unless TLS is configured, but a guess never sends a token in clear text."""
    url = str(value)
    if "://" not in url:
        url = f"https://{url}"
    try:
        parts = urllib.parse.urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:  # that port, or a bracket left open
        valid = False
    if not valid:
        raise ConfigurationError(f"{where}: its server is not an http:// or https:// URL")
    return url.rstrip("/")


def _split_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its ``user:password@``, and those two (percent-decoded), if any."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url, None
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    bare = urllib.parse.urlunsplit(parts._replace(netloc=host))
    return bare, (urllib.parse.unquote(user), urllib.parse.unquote(password))


def _inline_token(value: object) -> str | None:
    """The user's ``token``, without the whitespace around it (a ``token: |`` block's final
    newline), as a token file's is: HTTP headers cannot hold a newline."""
    return str(value).strip() or None if value is not None else None


def _flag(value: object, where: str) -> bool:
    """``insecure-skip-tls-verify``: a YAML boolean, as client-go requires (a string
    ``"false"`` must not turn verification off)."""
    if value is None or isinstance(value, bool):
        return bool(value)
    raise ConfigurationError(f"{where}: insecure-skip-tls-verify is not true or false")


def _pem(value: object, where: str) -> str | None:
    """``certificate-authority-data``: base64 of PEM text, as client-go requires."""
    data = _decoded(value, where, "certificate-authority-data")
    if not data:
        return None
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise ConfigurationError(
            f"{where}: certificate-authority-data is not PEM (base64 of PEM text, not DER)"
        ) from None


@dataclass
class _Merged:
    """Several kubeconfig files as one, each entry with the file that defines it."""

    origin: str
    current_context: str | None = None
    entries: dict[str, list[tuple[dict[str, Any], str]]] = field(
        default_factory=lambda: {"clusters": [], "users": [], "contexts": []}
    )

    def named(
        self, key: str, name: object, origin: str, *, required: bool = True
    ) -> tuple[dict[str, Any], str]:
        """The first entry of ``key`` called ``name``, and its file (``origin`` if none)."""
        for entry, path in self.entries[key]:
            if entry.get("name") == name:
                return entry, path
        if required:
            raise ConfigurationError(f"{origin}: no {key[:-1]} named {name!r}")
        return {}, origin


def _merge(configs: list[tuple[dict[str, Any], str]]) -> _Merged | None:
    """kubectl's merge of several files: the first file to name something wins."""
    if not configs:
        return None
    merged = _Merged(origin=configs[0][1])
    for config, path in configs:
        if merged.current_context is None and config.get("current-context"):
            merged.current_context = str(config["current-context"])
            merged.origin = path
        for key, entries in merged.entries.items():
            entries.extend(
                (entry, path) for entry in config.get(key) or [] if isinstance(entry, dict)
            )
    return merged


def _path(base: Path, value: object) -> Path | None:
    if not value:
        return None
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else base / path


def _decoded(value: object, origin: str, name: str) -> bytes | None:
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        raise ConfigurationError(f"{origin}: {name} is not valid base64") from None
