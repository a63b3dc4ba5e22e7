"""A certificate authority and a broker certificate for the dev stack's and the tests' Kafka: the
clients' listener speaks TLS, and clients check the broker against this CA (and its address
against the certificate, as librdkafka does by default). Production brings its own certificates.

PEM files throughout: Kafka reads a PEM keystore (ssl.keystore.type=PEM), librdkafka a PEM CA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from peloton.private import private_dir, write_private

VALID_DAYS = 3650


def make_certificates(dir: Path, names: Sequence[str] = ()) -> tuple[Path, Path]:
    """(ca.pem, broker.pem) in `dir`: the CA clients trust, and the brokers' key and certificate
    (for 127.0.0.1, localhost and `names`: host names or addresses), signed by that CA."""
    private_dir(dir)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "peloton dev CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "peloton dev broker")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost"), *map(_san, names)]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_path, broker_path = dir / "ca.pem", dir / "broker.pem"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    write_private(broker_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption())
                  + cert.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM))
    return ca_path, broker_path


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)
