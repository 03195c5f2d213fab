"""External JWTs (an identity provider's) accepted or refused over real pyarrow.flight clients.

Tokens are signed with RSA keys made here (cryptography); the server verifies them with the
public half as a JWK set, from a file (in-process server) or from a URL served by a loopback
HTTP server (the ``lance-flight serve --jwt-*`` process).  Truth for a write: pylance reading
the dataset afterwards.
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import os
import threading
import time

import jwt
import lance
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from flight_fixtures import serve

from flight_server.auth import Authenticator
from flight_server.jwtauth import ExternalJwt
from flight_server.server import LanceFlightServer

ISSUER = "https://idp.example.test/"
AUDIENCE = "lance-flight-tests"
KID = "test-key-1"
SECRET = "jwt-tests-secret-0123456789abcdef"


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def jwks(key) -> dict:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return {"keys": [{**public, "kid": KID, "alg": "RS256", "use": "sig"}]}


def token(key, *, kid: str | None = KID, alg: str = "RS256", **overrides) -> str:
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "carol",
        "roles": ["read"],
        "iat": now,
        "exp": now + 300,
    }
    claims.update(overrides)
    claims = {k: v for k, v in claims.items() if v is not None}
    headers = {"kid": kid} if kid else None
    return jwt.encode(claims, key, algorithm=alg, headers=headers)


def bearer(tok: str) -> fl.FlightCallOptions:
    return fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {tok}".encode())])


def _table(n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64())})


def read_all(client: fl.FlightClient, options) -> pa.Table:
    info = client.get_flight_info(fl.FlightDescriptor.for_path("ds"), options)
    return pa.concat_tables([client.do_get(e.ticket, options).read_all() for e in info.endpoints])


def delete(client: fl.FlightClient, options, flt: str) -> dict:
    body = json.dumps({"dataset": "ds", "filter": flt}).encode()
    results = list(client.do_action(fl.Action("delete", body), options))
    return json.loads(results[0].body.to_pybytes())


@pytest.fixture
def server(tmp_path, jwks):
    lance.write_dataset(_table(10), str(tmp_path / "ds"))
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks))
    external = ExternalJwt(str(path), issuer=ISSUER, audience=AUDIENCE)
    auth = Authenticator(secret=SECRET, external=external)
    srv = LanceFlightServer(str(tmp_path), "grpc://127.0.0.1:0", warm=False, authenticator=auth)
    try:
        yield srv, tmp_path / "ds"
    finally:
        srv.shutdown()


def test_valid_tokens_read_and_write_by_role(server, key):
    srv, ds = server
    with fl.connect(srv.location) as client:
        reader = bearer(token(key))
        assert read_all(client, reader).equals(lance.dataset(str(ds)).to_table())
        with pytest.raises(fl.FlightUnauthorizedError, match="read-only"):
            delete(client, reader, "id < 3")
        writer = bearer(token(key, sub="dave", roles="write"))  # a string claim works too
        assert delete(client, writer, "id < 3")["deleted"] == 3
    assert lance.dataset(str(ds)).count_rows() == 7


@pytest.mark.parametrize(
    "case",
    ["wrong-issuer", "wrong-audience", "no-audience", "expired", "bad-signature", "unknown-kid",
     "hs256-with-public-key", "unsigned"],
)  # fmt: skip
def test_invalid_tokens_are_unauthenticated(server, key, jwks, case):
    srv, ds = server
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    now = int(time.time())
    tok = {
        "wrong-issuer": lambda: token(key, iss="https://evil.example.test/"),
        "wrong-audience": lambda: token(key, aud="another-service"),
        "no-audience": lambda: token(key, aud=None),
        "expired": lambda: token(key, iat=now - 600, exp=now - 60),
        "bad-signature": lambda: token(other),  # same kid, another key
        "unknown-kid": lambda: token(key, kid="nope"),
        "hs256-with-public-key": lambda: _hs256(pem),
        "unsigned": lambda: token(None, alg="none"),
    }[case]()
    with fl.connect(srv.location) as client:
        match = "expired" if case == "expired" else "invalid bearer token"
        with pytest.raises(fl.FlightUnauthenticatedError, match=match):
            read_all(client, bearer(tok))
    assert lance.dataset(str(ds)).count_rows() == 10


def _hs256(secret: bytes) -> str:
    """The algorithm-confusion attack: HMAC "signed" with the public key's PEM."""
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "roles": ["write"], "exp": now + 60}
    header = jwt.utils.base64url_encode(json.dumps({"alg": "HS256", "kid": KID}).encode())
    payload = jwt.utils.base64url_encode(json.dumps(claims).encode())
    signing = header + b"." + payload
    mac = hmac.new(secret, signing, hashlib.sha256).digest()
    return (signing + b"." + jwt.utils.base64url_encode(mac)).decode()


def test_token_without_a_known_role_is_refused(server, key):
    srv, _ = server
    with fl.connect(srv.location) as client:
        for roles in (None, [], ["admin"], 7):
            with pytest.raises(fl.FlightUnauthorizedError, match="grants no role"):
                read_all(client, bearer(token(key, roles=roles)))


class _Jwks(http.server.BaseHTTPRequestHandler):
    body = b""
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        type(self).hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args) -> None:
        pass


def test_serve_flags_with_jwks_from_a_url(tmp_path, key, jwks):
    """``lance-flight serve --jwt-jwks URL --jwt-issuer --jwt-audience --jwt-roles-claim
    --jwt-role-map``: the key set is fetched from a loopback HTTP server."""
    lance.write_dataset(_table(10), str(tmp_path / "ds"))
    _Jwks.body = json.dumps(jwks).encode()
    _Jwks.hits = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Jwks)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/.well-known/jwks.json"
    args = (
        "--no-warm", "--jwt-jwks", url, "--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE,
        "--jwt-roles-claim", "groups", "--jwt-role-map", "lance-admins=write,staff=read",
    )  # fmt: skip
    try:
        with serve(str(tmp_path), *args) as s, fl.connect(s.location) as client:
            staff = bearer(token(key, roles=None, groups=["staff", "other"]))
            assert read_all(client, staff).num_rows == 10
            with pytest.raises(fl.FlightUnauthorizedError, match="read-only"):
                delete(client, staff, "id < 4")
            admin = bearer(token(key, roles=None, groups="lance-admins"))
            assert delete(client, admin, "id < 4")["deleted"] == 4
            with pytest.raises(fl.FlightUnauthorizedError, match="grants no role"):
                read_all(client, bearer(token(key)))  # "roles" is not the claim asked for
            with pytest.raises(fl.FlightUnauthenticatedError):
                read_all(client, bearer(token(key, aud="x", groups="staff")))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert _Jwks.hits and set(_Jwks.hits) == {"/.well-known/jwks.json"}
    assert lance.dataset(os.path.join(tmp_path, "ds")).count_rows() == 6
