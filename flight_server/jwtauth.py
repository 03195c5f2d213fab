"""Bearer tokens as JWTs (PyJWT): the ones this server signs, and an identity provider's.

The server's own tokens (issued at login) are HS256 JWTs signed with the shared secret, with
issuer :data:`OWN_ISSUER`, the user in ``sub`` and the role in ``role``:
:class:`OwnTokens` makes and checks them.  :class:`ExternalJwt` optionally accepts tokens
from an external identity provider: signed with an asymmetric key published as a JWK set (a
file, or a URL fetched and cached by ``jwt.PyJWKClient``), with the configured issuer and
audience, unexpired, the user in a claim (``sub``) and the roles in another (``roles``, a
string or a list), mapped to this server's ``read``/``write``.  HMAC algorithms are never
accepted from an external token: its key is public, so an HS256 token "signed" with it would
prove nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jwt
import pyarrow.flight as flight

from lance_format.errors import InvalidArgumentError

log = logging.getLogger(__name__)

OWN_ISSUER = "lance-flight"
OWN_ALGORITHM = "HS256"
#: what an external token may be signed with (asymmetric only)
EXTERNAL_ALGORITHMS = (
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
)  # fmt: skip
DEFAULT_ROLES_CLAIM = "roles"
DEFAULT_USER_CLAIM = "sub"
DEFAULT_ROLE_MAP = {"read": "read", "write": "write"}
_MAX_JWKS_BYTES = 1 << 20
_RANK = {"read": 1, "write": 2}


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated parts: a JWT (static tokens never contain a dot)."""
    return token.count(".") == 2


def unverified_claims(token: str) -> dict[str, Any]:
    """A JWT's payload, unverified: only for naming who a refused call claimed to be."""
    claims = jwt.decode(token, options={"verify_signature": False})
    return claims if isinstance(claims, dict) else {}


def _invalid() -> flight.FlightUnauthenticatedError:
    return flight.FlightUnauthenticatedError("invalid bearer token")


def _expired() -> flight.FlightUnauthenticatedError:
    error = flight.FlightUnauthenticatedError("bearer token expired: authenticate again")
    error.expired = True  # a client that logged in once: not a failed login
    return error


class OwnTokens:
    """The server's HS256 tokens: ``(user, role, expiry)`` claims any process holding the
    same secret accepts.  ``clock`` (seconds) is injectable for tests."""

    def __init__(self, secret: bytes, clock: Callable[[], float]):
        # a 32-byte key whatever the secret's length (HS256 wants at least that much)
        self._secret = hashlib.sha256(b"lance-flight bearer tokens\0" + secret).digest()
        self._clock = clock

    def issue(self, user: str, role: str, ttl: float) -> str:
        now = self._clock()
        claims = {
            "iss": OWN_ISSUER,
            "sub": user,
            "role": role,
            "iat": int(now),
            "exp": int(now + ttl),
            "jti": secrets.token_hex(6),
        }
        return jwt.encode(claims, self._secret, algorithm=OWN_ALGORITHM)

    def is_own(self, token: str) -> bool:
        """Whether a token claims to be ours (HS256, no key id); not yet verified."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return False
        return header.get("alg") == OWN_ALGORITHM and "kid" not in header

    def verify(self, token: str) -> tuple[str, str]:
        """``(user, role)`` of a token we signed, else an unauthenticated error."""
        try:
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=[OWN_ALGORITHM],
                issuer=OWN_ISSUER,
                # expiry against the injectable clock, below
                options={"require": ["iss", "sub", "exp"], "verify_exp": False},
            )
        except jwt.PyJWTError:
            raise _invalid() from None
        user, role, expires = claims.get("sub"), claims.get("role"), claims.get("exp")
        if not isinstance(user, str) or role not in _RANK or not isinstance(expires, int):
            raise _invalid()
        if self._clock() >= expires:
            raise _expired()
        return user, role


class ExternalJwt:
    """Verifies an identity provider's JWTs.

    ``jwks``: a file holding a JWK set, or an ``http(s)://`` URL of one (fetched when a key
    id is first seen, cached).  ``issuer`` and ``audience`` must match the token's ``iss``
    and ``aud``.  ``roles_claim`` names the claim holding the caller's roles (a string or a
    list); ``role_map`` maps its values to ``read``/``write`` (the highest wins); a token
    with none of them is refused (PERMISSION_DENIED).  ``user_claim`` names the user.
    """

    def __init__(
        self,
        jwks: str,
        *,
        issuer: str | None = None,
        audience: str | None = None,
        roles_claim: str = DEFAULT_ROLES_CLAIM,
        role_map: Mapping[str, str] | None = None,
        user_claim: str = DEFAULT_USER_CLAIM,
        leeway: float = 0.0,
    ):
        self.issuer = issuer
        self.audience = audience
        self.roles_claim = roles_claim
        self.user_claim = user_claim
        self.role_map = dict(DEFAULT_ROLE_MAP if role_map is None else role_map)
        self.leeway = leeway
        for external, role in self.role_map.items():
            if role not in _RANK:
                raise InvalidArgumentError(f"--jwt-role-map: {external!r} maps to unknown {role!r}")
        if issuer is None or audience is None:
            log.warning(
                "external JWTs are accepted without checking their %s",
                " and ".join(n for n, v in (("issuer", issuer), ("audience", audience)) if not v),
            )
        self._client: jwt.PyJWKClient | None = None
        self._keys: jwt.PyJWKSet | None = None
        if jwks.startswith(("http://", "https://")):
            self._client = jwt.PyJWKClient(jwks, cache_keys=True, lifespan=300, timeout=10)
        else:
            self._keys = _load_jwks_file(jwks)

    def _key(self, token: str) -> Any:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise _invalid() from None
        if header.get("alg") not in EXTERNAL_ALGORITHMS:
            raise _invalid()
        kid = header.get("kid")
        if self._client is not None:
            try:
                return self._client.get_signing_key_from_jwt(token).key
            except jwt.PyJWKClientConnectionError as exc:
                log.warning("cannot fetch the JWK set: %s", exc)
                raise flight.FlightUnavailableError(
                    "cannot fetch the identity provider's keys; retry later"
                ) from None
            except jwt.PyJWTError:
                raise _invalid() from None
        assert self._keys is not None
        keys = self._keys.keys
        if kid is None and len(keys) == 1:
            return keys[0].key
        for key in keys:
            if kid is not None and key.key_id == kid:
                return key.key
        raise _invalid()

    def verify(self, token: str) -> tuple[str, str]:
        """``(user, role)`` of a valid token; unauthenticated when it is not valid,
        unauthorized when it is but grants no role here."""
        key = self._key(token)
        required = ["exp", self.user_claim]
        required += [c for c, v in (("iss", self.issuer), ("aud", self.audience)) if v]
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=list(EXTERNAL_ALGORITHMS),
                issuer=self.issuer,
                audience=self.audience,
                leeway=self.leeway,
                options={"require": required, "verify_aud": self.audience is not None},
            )
        except jwt.ExpiredSignatureError:
            raise _expired() from None
        except jwt.PyJWTError:
            raise _invalid() from None
        user = claims.get(self.user_claim)
        if not isinstance(user, str) or not user:
            raise _invalid()
        raw = claims.get(self.roles_claim)
        values = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        roles = [self.role_map[v] for v in values if isinstance(v, str) and v in self.role_map]
        if not roles:
            raise flight.FlightUnauthorizedError(
                f"the token of {user!r} grants no role here (claim {self.roles_claim!r} "
                f"must hold one of {sorted(self.role_map)})"
            )
        return user, max(roles, key=_RANK.__getitem__)


def _load_jwks_file(path: str) -> jwt.PyJWKSet:
    p = Path(path)
    try:
        if p.stat().st_size > _MAX_JWKS_BYTES:
            raise InvalidArgumentError("the JWK set file is too large", path=path)
        data = json.loads(p.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "kty" in data:  # a single JWK
            data = {"keys": [data]}
        return jwt.PyJWKSet.from_dict(data)
    except FileNotFoundError:
        raise InvalidArgumentError("JWK set file not found", path=path) from None
    except (OSError, UnicodeError, ValueError, jwt.PyJWTError) as exc:
        raise InvalidArgumentError(f"unusable JWK set: {exc}", path=path) from None


def parse_role_map(text: str) -> dict[str, str]:
    """``EXTERNAL=ROLE,...`` (``--jwt-role-map``) as a dict."""
    out = {}
    for pair in text.split(","):
        external, sep, role = pair.strip().partition("=")
        if not sep or not external or role not in _RANK:
            raise ValueError(f"expected EXTERNAL=read|write[,...], got {pair!r}")
        out[external] = role
    return out
