"""Self-signed certificates for TLS tests, made with the ``openssl`` command line.

A missing ``openssl`` is an error, not a skip: the TLS tests must run.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def make_self_signed_cert(
    directory: str | Path,
    name: str = "server",
    common_name: str = "localhost",
    dns: tuple[str, ...] = ("localhost",),
    ips: tuple[str, ...] = ("127.0.0.1",),
) -> tuple[Path, Path]:
    """Write ``<name>.crt`` and ``<name>.key`` (EC P-256, valid 2 days) and return their paths.

    The certificate is its own CA, so clients pass it as ``tls_root_certs``.
    """
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl command line is required for the TLS tests")
    directory = Path(directory)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    san = ",".join([*(f"DNS:{d}" for d in dns), *(f"IP:{i}" for i in ips)])
    cmd = [
        openssl, "req", "-x509", "-nodes", "-days", "2",
        "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-keyout", str(key), "-out", str(cert),
        "-subj", f"/CN={common_name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
    ]  # fmt: skip
    if san:
        cmd += ["-addext", f"subjectAltName={san}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"openssl failed ({done.returncode}): {done.stderr.strip()}")
    return cert, key
