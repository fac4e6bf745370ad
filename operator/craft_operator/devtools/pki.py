"""Certificates and keys for the local control plane: a CA, the API server's serving
certificate, the simulated kubelet's serving certificate and the API server's client
certificate for it, the service-account signing key pair and an admin bearer token.

Development material only: written once into the control plane's state directory, never
reused anywhere else.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Names and addresses the API server answers to, on this machine and in-cluster.
SERVING_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
SERVING_IPS = ("127.0.0.1", "10.96.0.1")
VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class PkiFiles:
    """Where each piece of the control plane's key material lives."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        """The CA that signed the serving certificate (clients trust it)."""
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        """The CA's private key."""
        return self.directory / "ca.key"

    @property
    def serving_cert(self) -> Path:
        """The API server's serving certificate."""
        return self.directory / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        """The API server's serving key."""
        return self.directory / "apiserver.key"

    @property
    def kubelet_cert(self) -> Path:
        """The simulated kubelet's serving certificate (the pod exec endpoint)."""
        return self.directory / "kubelet.crt"

    @property
    def kubelet_key(self) -> Path:
        """The simulated kubelet's serving key."""
        return self.directory / "kubelet.key"

    @property
    def kubelet_client_cert(self) -> Path:
        """The API server's client certificate towards the kubelet."""
        return self.directory / "apiserver-kubelet-client.crt"

    @property
    def kubelet_client_key(self) -> Path:
        """The API server's client key towards the kubelet."""
        return self.directory / "apiserver-kubelet-client.key"

    @property
    def service_account_key(self) -> Path:
        """The private key that signs service-account tokens."""
        return self.directory / "sa.key"

    @property
    def service_account_public_key(self) -> Path:
        """The public key that verifies service-account tokens."""
        return self.directory / "sa.pub"

    @property
    def token_file(self) -> Path:
        """The API server's static token file (the admin token only)."""
        return self.directory / "tokens.csv"

    @property
    def admin_token(self) -> Path:
        """The admin bearer token (group system:masters), alone in a file."""
        return self.directory / "admin.token"


def _write_private(path: Path, data: bytes) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(data)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@dataclass(frozen=True)
class _Authority:
    """The CA, while it signs: its key, its certificate and the validity it gives."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    not_before: datetime.datetime

    def issue(
        self,
        cert_path: Path,
        key_path: Path,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        names: Sequence[str] = (),
        ips: Sequence[str] = (),
    ) -> None:
        """Write a new key and a certificate for it, signed by this CA, for ``usage``."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.not_before)
            .not_valid_after(self.not_before + VALIDITY)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        alternative_names: list[x509.GeneralName] = [x509.DNSName(name) for name in names]
        alternative_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        if alternative_names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(alternative_names), critical=False
            )
        _write_private(key_path, _pem_key(key))
        cert_path.write_bytes(
            builder.sign(self.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
        )


def _new_authority(files: PkiFiles) -> _Authority:
    """A new self-signed CA, written to ``files``; valid from five minutes ago (clock skew)."""
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("craft-controlplane-ca"))
        .issuer_name(_name("craft-controlplane-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_private(files.ca_key, _pem_key(ca_key))
    files.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return _Authority(ca_key, ca_cert, now)


def _issue_certificates(ca: _Authority, files: PkiFiles) -> None:
    """The API server's and the kubelet's serving certificates, the API server's client one."""
    ca.issue(
        files.serving_cert,
        files.serving_key,
        _name("kube-apiserver"),
        ExtendedKeyUsageOID.SERVER_AUTH,
        SERVING_DNS_NAMES,
        SERVING_IPS,
    )
    ca.issue(
        files.kubelet_cert,
        files.kubelet_key,
        _name("kwok-node"),
        ExtendedKeyUsageOID.SERVER_AUTH,
        ("localhost", "kwok-node"),
        ("127.0.0.1",),
    )
    ca.issue(
        files.kubelet_client_cert,
        files.kubelet_client_key,
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-kubelet-client"),
            ]
        ),
        ExtendedKeyUsageOID.CLIENT_AUTH,
    )


def _write_service_account_keys(files: PkiFiles) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_private(files.service_account_key, _pem_key(key))
    files.service_account_public_key.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _write_admin_token(files: PkiFiles) -> None:
    token = secrets.token_urlsafe(32)
    _write_private(files.token_file, f'{token},admin,admin-uid,"system:masters"\n'.encode())
    _write_private(files.admin_token, token.encode())


def ensure_pki(directory: Path) -> PkiFiles:
    """Create the key material in ``directory`` unless it is all there already."""
    files = PkiFiles(directory)
    wanted = (
        files.ca_cert,
        files.serving_cert,
        files.serving_key,
        files.kubelet_cert,
        files.kubelet_client_cert,
        files.service_account_key,
        files.service_account_public_key,
        files.token_file,
        files.admin_token,
    )
    if all(path.exists() for path in wanted):
        return files
    directory.mkdir(parents=True, exist_ok=True)
    _issue_certificates(_new_authority(files), files)
    _write_service_account_keys(files)
    _write_admin_token(files)
    return files
