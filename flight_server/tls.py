"""TLS for the Flight server: certificate and key files checked at startup, not at first call.

gRPC only reports a bad certificate when a client connects, with an opaque handshake error, so
the files are validated here with Python's :mod:`ssl` (PEM syntax, an unencrypted key, and the
key matching the certificate) before the server starts.  A TLS server listens on a
``grpc+tls://`` location; plain ``grpc://`` clients cannot talk to it.

Optional mutual TLS: pass ``client_ca`` and only clients presenting a certificate signed by that
CA get through.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any

import pyarrow.flight as flight

from lance_format.errors import InvalidArgumentError

__all__ = [
    "TLSConfigError",
    "load_cert_key_pair",
    "location",
    "read_pem",
    "tls_server_options",
]

_MAX_PEM_BYTES = 1024 * 1024


class TLSConfigError(InvalidArgumentError):
    """A certificate or key file is missing, unreadable, not PEM, or the two do not match."""


def read_pem(path: str | os.PathLike[str], what: str, marker: str) -> bytes:
    """The bytes of a PEM file that contains a ``-----BEGIN <...marker...>-----`` block."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if not p.is_file():
            raise TLSConfigError(f"{what} is not a regular file", path=str(p))
        if size > _MAX_PEM_BYTES:
            raise TLSConfigError(f"{what} is {size} bytes: too large for PEM", path=str(p))
        data = p.read_bytes()
    except FileNotFoundError:
        raise TLSConfigError(f"{what} not found", path=str(p)) from None
    except OSError as exc:
        raise TLSConfigError(f"cannot read {what}: {exc.strerror or exc}", path=str(p)) from None
    if not any(
        line.startswith(b"-----BEGIN ") and marker.encode() in line for line in data.splitlines()
    ):
        raise TLSConfigError(f"{what} is not PEM (no '-----BEGIN ...{marker}-----')", path=str(p))
    return data


def _no_password() -> bytes:
    # ssl would prompt on the terminal for an encrypted key; gRPC cannot use one anyway
    raise TLSConfigError("the TLS key is encrypted; gRPC needs an unencrypted PEM key")


def load_cert_key_pair(
    cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]
) -> flight.CertKeyPair:
    """Read and validate a certificate chain and its private key for ``tls_certificates``."""
    cert = read_pem(cert_file, "TLS certificate file", "CERTIFICATE")
    key = read_pem(key_file, "TLS key file", "PRIVATE KEY")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(os.fspath(cert_file), os.fspath(key_file), password=_no_password)
    except TLSConfigError:
        raise
    except ssl.SSLError as exc:
        reason = exc.reason or str(exc)
        if "KEY_VALUES_MISMATCH" in str(reason).upper():
            problem = "the TLS key does not belong to the certificate"
        else:
            problem = f"the TLS certificate or key cannot be loaded ({reason})"
        raise TLSConfigError(problem, path=os.fspath(cert_file)) from None
    except OSError as exc:
        raise TLSConfigError(f"cannot load TLS files: {exc}", path=os.fspath(cert_file)) from None
    return flight.CertKeyPair(cert=cert, key=key)


def tls_server_options(
    cert_file: str | os.PathLike[str],
    key_file: str | os.PathLike[str],
    client_ca: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``FlightServerBase.__init__``: ``tls_certificates`` and, with
    ``client_ca``, ``verify_client`` + ``root_certificates`` (mutual TLS)."""
    options: dict[str, Any] = {"tls_certificates": [load_cert_key_pair(cert_file, key_file)]}
    if client_ca is not None:
        options["verify_client"] = True
        options["root_certificates"] = read_pem(client_ca, "client CA file", "CERTIFICATE")
    return options


def location(host: str, port: int, tls: bool) -> str:
    """The Flight location URI: ``grpc+tls://`` with TLS, ``grpc://`` without (IPv6 bracketed)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{'grpc+tls' if tls else 'grpc'}://{host}:{port}"
