"""Health probe: call the server's ``health`` action and check it answers ``{"status": "ok"}``.

``python -m flight_server.health [URI]`` exits 0 when healthy and 1 otherwise (Docker's
HEALTHCHECK).  The URI defaults to ``$LANCE_FLIGHT_HEALTH_URI``, then
``grpc://127.0.0.1:8815``.

With authentication on, a probe without credentials is answered UNAUTHENTICATED: the server
is up and enforcing auth, which counts as healthy unless ``accept_auth_required=False``
(``--strict``).  Give a token (``--token`` or ``$LANCE_FLIGHT_TOKEN``) or a user and password
(``$LANCE_FLIGHT_USER`` / ``$LANCE_FLIGHT_PASSWORD``) to run the real check.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import pyarrow.flight as flight

__all__ = ["HealthError", "check", "diagnose", "probe"]

DEFAULT_URI = "grpc://127.0.0.1:8815"
URI_ENV = "LANCE_FLIGHT_HEALTH_URI"


class HealthError(Exception):
    """The server answered, but not with a healthy status."""


def probe(
    uri: str,
    timeout: float = 5.0,
    *,
    tls_root_certs: bytes | None = None,
    disable_server_verification: bool = False,
    token: str | None = None,
    username: str | None = None,
    password: str | None = None,
) -> dict[str, Any]:
    """The ``health`` action's JSON answer; raises a Flight error or :class:`HealthError`."""
    kwargs: dict[str, Any] = {}
    if tls_root_certs is not None:
        kwargs["tls_root_certs"] = tls_root_certs
    if disable_server_verification:
        kwargs["disable_server_verification"] = True
    with flight.connect(uri, **kwargs) as client:
        headers: list[tuple[bytes, bytes]] = []
        if token:
            headers.append((b"authorization", f"Bearer {token}".encode()))
        elif username is not None:
            options = flight.FlightCallOptions(timeout=timeout)
            headers.append(client.authenticate_basic_token(username, password or "", options))
        options = flight.FlightCallOptions(timeout=timeout, headers=headers)
        results = list(client.do_action(flight.Action("health", b""), options=options))
    if not results:
        raise HealthError("the health action returned nothing")
    try:
        answer = json.loads(results[0].body.to_pybytes())
    except (ValueError, UnicodeError) as exc:
        raise HealthError(f"the health action did not return JSON: {exc}") from None
    if not isinstance(answer, dict) or answer.get("status") != "ok":
        raise HealthError(f"unhealthy: {answer!r}")
    return answer


def check(
    uri: str,
    timeout: float = 5.0,
    *,
    accept_auth_required: bool = True,
    **kwargs: Any,
) -> bool:
    """True when the server at ``uri`` reports itself healthy within ``timeout`` seconds.

    ``kwargs`` go to :func:`probe` (TLS roots, token, user and password).
    """
    return diagnose(uri, timeout, accept_auth_required=accept_auth_required, **kwargs)[0]


def diagnose(
    uri: str, timeout: float = 5.0, *, accept_auth_required: bool = True, **kwargs: Any
) -> tuple[bool, str]:
    """Like :func:`check`, with a one-line reason."""
    try:
        answer = probe(uri, timeout, **kwargs)
    except flight.FlightUnauthenticatedError as exc:
        if accept_auth_required and not (kwargs.get("token") or kwargs.get("username")):
            return True, "up (authentication required)"
        return False, f"unauthenticated: {_first_line(exc)}"
    except (flight.FlightError, HealthError, OSError, ValueError, KeyError) as exc:
        # OSError/ValueError/KeyError: Arrow errors that are not Flight errors (bad URI, ...)
        return False, f"{type(exc).__name__}: {_first_line(exc)}"
    return True, json.dumps(answer, default=str)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0][:200]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flight_server.health", description=__doc__)
    parser.add_argument("uri", nargs="?", default=os.environ.get(URI_ENV, DEFAULT_URI))
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--tls-root-certs", help="PEM file of the CA (or self-signed cert)")
    parser.add_argument("--insecure-tls", action="store_true", help="skip server verification")
    parser.add_argument("--token", default=os.environ.get("LANCE_FLIGHT_TOKEN"))
    parser.add_argument("--strict", action="store_true", help="auth-required is unhealthy")
    args = parser.parse_args(argv)
    kwargs: dict[str, Any] = {"disable_server_verification": args.insecure_tls}
    if args.tls_root_certs:
        try:
            with open(args.tls_root_certs, "rb") as f:
                kwargs["tls_root_certs"] = f.read()
        except OSError as exc:
            print(f"unhealthy: cannot read {args.tls_root_certs}: {exc}", file=sys.stderr)
            return 1
    if args.token:
        kwargs["token"] = args.token
    elif os.environ.get("LANCE_FLIGHT_USER"):
        kwargs["username"] = os.environ["LANCE_FLIGHT_USER"]
        kwargs["password"] = os.environ.get("LANCE_FLIGHT_PASSWORD", "")
    healthy, reason = diagnose(
        args.uri, args.timeout, accept_auth_required=not args.strict, **kwargs
    )
    print(f"{'healthy' if healthy else 'unhealthy'}: {args.uri}: {reason}")
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
