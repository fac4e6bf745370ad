"""The local control plane's key material: a CA that signs what each party presents."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from craft_operator.devtools.pki import ensure_pki


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    public_key = ca.public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    cert.verify_directly_issued_by(ca)
    return True


def test_the_serving_certificates_are_signed_by_the_ca_for_loopback(tmp_path: Path) -> None:
    files = ensure_pki(tmp_path)
    ca = load(files.ca_cert)
    for path in (files.serving_cert, files.kubelet_cert):
        cert = load(path)
        assert signed_by(cert, ca)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]


def test_the_api_servers_kubelet_client_is_an_admin_client(tmp_path: Path) -> None:
    files = ensure_pki(tmp_path)
    cert = load(files.kubelet_client_cert)
    assert signed_by(cert, load(files.ca_cert))
    assert "O=system:masters" in cert.subject.rfc4514_string()
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_private_material_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    files = ensure_pki(tmp_path)
    for path in (
        files.ca_key,
        files.serving_key,
        files.kubelet_key,
        files.service_account_key,
        files.token_file,
        files.admin_token,
    ):
        assert path.stat().st_mode & 0o077 == 0, path


def test_the_token_file_makes_the_admin_token_a_system_master(tmp_path: Path) -> None:
    files = ensure_pki(tmp_path)
    token = files.admin_token.read_text()
    assert files.token_file.read_text() == f'{token},admin,admin-uid,"system:masters"\n'


def test_existing_material_is_kept(tmp_path: Path) -> None:
    first = ensure_pki(tmp_path)
    before = {path: path.read_bytes() for path in tmp_path.iterdir()}
    assert ensure_pki(tmp_path) == first
    assert {path: path.read_bytes() for path in tmp_path.iterdir()} == before
