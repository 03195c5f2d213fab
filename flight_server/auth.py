"""Optional authentication for the Flight server: HTTP Basic through the handshake, bearer tokens.

How clients authenticate (what pyarrow's ``client.authenticate_basic_token(user, password)`` and
the ADBC Flight SQL driver's ``db_kwargs={"username": ..., "password": ...}`` do):

1. ``Handshake`` with header ``authorization: Basic base64(user:password)``.  The server checks
   the password against the users file and answers with header ``authorization: Bearer
   <token>``.
2. Every later call carries ``authorization: Bearer <token>``.

Clients that send ``authorization: Basic ...`` on every call instead (some ADBC modes, plain
HTTP habits) are accepted too: each such call is verified and answered with a bearer token
header, as the handshake is; a verified password is remembered (as a keyed hash, for
``basic_cache_seconds``) so repeated calls do not pay for a password check each time.

Failed logins are counted and rate-limited (:mod:`.loginlimit`), and logged.

Tokens are HS256 JWTs of ``(user, role, expiry)`` (:mod:`.jwtauth`), so any server process
holding the same secret accepts them: the CLI's worker processes share the parent's secret
(constructor argument, or the ``LANCE_FLIGHT_SECRET`` environment variable).  Static tokens
from a tokens file are accepted as well, for services that cannot do a handshake, and so are
an external identity provider's JWTs when one is configured (:class:`.jwtauth.ExternalJwt`:
issuer, audience, its JWK set, a roles claim).

pyarrow answers UNIMPLEMENTED to ``Handshake`` unless the server has a ``ServerAuthHandler``,
so :class:`HandshakeAuthHandler` is installed only for that; every check happens in
:class:`AuthMiddlewareFactory`, which sees the headers of every call.  Build the server's
keyword arguments with :func:`auth_server_options`.

Roles: ``read`` (the default) may call everything that does not change data; ``write`` may also
put and run mutating actions.  Handlers call :func:`require_write` before changing anything.
Missing or bad credentials are *unauthenticated* errors; a read-only user attempting a write is
an *unauthorized* error.

Files (``#`` starts a comment line; blank lines are ignored):

- users file, one ``user:password-hash[:role[:grant]]`` per line, hashes from
  :func:`hash_password` or ``python -m flight_server.auth hash --user NAME [--role write]``;
- tokens file, one ``TOKEN [USER [ROLE [GRANT]]]`` per line (whitespace separated), tokens from
  ``python -m flight_server.auth token``.

A grant (``read=PREFIX,...;write=PREFIX,...``, see :mod:`.permissions`) limits a user or token
to datasets under those name prefixes; without one, every dataset is allowed.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import getpass
import hashlib
import hmac
import logging
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jwt
import pyarrow.flight as flight

from lance_format.errors import InvalidArgumentError

from .jwtauth import ExternalJwt, OwnTokens, looks_like_jwt, unverified_claims
from .loginlimit import LoginLimiter
from .permissions import Grants

__all__ = [
    "AUTH_MIDDLEWARE_KEY",
    "ROLES",
    "SECRET_ENV",
    "AuthConfigError",
    "AuthMiddlewareFactory",
    "AuthObserver",
    "Authenticator",
    "Grants",
    "HandshakeAuthHandler",
    "Identity",
    "auth_server_options",
    "current_grants",
    "current_user",
    "generate_secret",
    "hash_password",
    "require_write",
    "verify_password",
]

log = logging.getLogger(__name__)

#: Key of the auth middleware in ``FlightServerBase(middleware=...)``; :func:`current_user` and
#: :func:`require_write` look it up under this key, so always register it through
#: :func:`auth_server_options`.
AUTH_MIDDLEWARE_KEY = "auth"
#: Environment variable read when no secret is passed to :class:`Authenticator`.
SECRET_ENV = "LANCE_FLIGHT_SECRET"
ROLES = ("read", "write")
DEFAULT_ROLE = "read"
DEFAULT_TOKEN_TTL = 12 * 3600.0

_HASH_SCHEME = "pbkdf2_sha256"
DEFAULT_ITERATIONS = 600_000  # OWASP's 2023 figure for PBKDF2-HMAC-SHA256
_MAX_ITERATIONS = 10_000_000  # a bad file must not make one login take minutes
_SALT_BYTES = 16
_MAX_TOKEN_CHARS = 4096  # checked before any decoding
DEFAULT_BASIC_CACHE_SECONDS = 300.0
_BASIC_CACHE_ENTRIES = 1024
_MAX_FILE_BYTES = 16 * 1024 * 1024
_MIN_SECRET_BYTES = 16
_MIN_STATIC_TOKEN_CHARS = 16
_USER_RE = re.compile(r"[^\s:]{1,128}")
_STATIC_TOKEN_RE = re.compile(r"[!-~]+")  # printable ASCII, no spaces: header-safe


class AuthConfigError(InvalidArgumentError):
    """A users file, tokens file or secret is unusable (reported at startup, with the line)."""


class Identity(NamedTuple):
    """Who made a call: the user name and its role (``read`` or ``write``)."""

    user: str
    role: str


# ---------------------------------------------------------------------------------------------
# password hashes


def hash_password(
    password: str, *, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> str:
    """A salted PBKDF2-HMAC-SHA256 hash: ``pbkdf2_sha256$ITERATIONS$SALT$HASH`` (base64url).

    The iteration count travels with the hash, so it can be raised later without breaking
    existing lines.
    """
    if not 1 <= iterations <= _MAX_ITERATIONS:
        raise AuthConfigError(f"iterations must be within 1..{_MAX_ITERATIONS}")
    salt = secrets.token_bytes(_SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    return f"{_HASH_SCHEME}${iterations}${_b64e(salt)}${_b64e(digest)}"


def verify_password(password: str, encoded: str) -> bool:
    """True when ``password`` matches a :func:`hash_password` string (constant-time compare)."""
    iterations, salt, expected = _parse_hash(encoded)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    return hmac.compare_digest(digest, expected)


def _parse_hash(encoded: str) -> tuple[int, bytes, bytes]:
    parts = encoded.split("$")
    if len(parts) != 4 or parts[0] != _HASH_SCHEME:
        raise AuthConfigError(f"password hash must look like {_HASH_SCHEME}$ITERATIONS$SALT$HASH")
    try:
        iterations = int(parts[1])
        salt, digest = _b64d(parts[2]), _b64d(parts[3])
    except (ValueError, binascii.Error) as exc:
        raise AuthConfigError(f"malformed password hash: {exc}") from None
    if not 1 <= iterations <= _MAX_ITERATIONS:
        raise AuthConfigError(f"password hash iterations {iterations} outside 1..{_MAX_ITERATIONS}")
    if not salt or len(digest) != hashlib.sha256().digest_size:
        raise AuthConfigError("malformed password hash: empty salt or wrong digest length")
    return iterations, salt, digest


def _b64e(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64d(text: str) -> bytes:
    if len(text) % 4 == 1 or not re.fullmatch(r"[A-Za-z0-9_-]*", text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def generate_secret() -> str:
    """A random signing secret (for ``LANCE_FLIGHT_SECRET`` or the parent of worker processes)."""
    return secrets.token_urlsafe(32)


# ---------------------------------------------------------------------------------------------
# the authenticator


@dataclass(frozen=True)
class _User:
    name: str
    password_hash: str
    iterations: int
    role: str


class Authenticator:
    """Checks credentials and issues/validates signed bearer tokens.

    ``users`` maps a user name to ``(password_hash, role)``; ``static_tokens`` maps a token to an
    :class:`Identity`; ``grants`` maps a user name (of either) to the :class:`Grants` limiting
    it.  ``secret`` signs tokens (str or bytes, >= 16 bytes); without it the
    ``LANCE_FLIGHT_SECRET`` environment variable is used, and without that a random secret, in
    which case tokens are only valid in this process (a warning says so).  ``limiter`` counts
    failed logins (default: :class:`.loginlimit.LoginLimiter` with its default rates).
    ``external`` (:class:`.jwtauth.ExternalJwt`) also accepts an identity provider's JWTs.
    ``clock`` is injectable for tests.
    """

    def __init__(
        self,
        users: Mapping[str, tuple[str, str]] | None = None,
        static_tokens: Mapping[str, Identity] | None = None,
        *,
        secret: str | bytes | None = None,
        token_ttl: float = DEFAULT_TOKEN_TTL,
        clock: Callable[[], float] = time.time,
        grants: Mapping[str, Grants] | None = None,
        limiter: LoginLimiter | None = None,
        basic_cache_seconds: float = DEFAULT_BASIC_CACHE_SECONDS,
        external: ExternalJwt | None = None,
    ):
        self._users: dict[str, _User] = {}
        for name, (password_hash, role) in (users or {}).items():
            _check_user_name(name)
            _check_role(role)
            iterations, _, _ = _parse_hash(password_hash)
            self._users[name] = _User(name, password_hash, iterations, role)
        # keyed by the token's SHA-256: the table never holds the tokens themselves
        self._static: dict[bytes, Identity] = {}
        for token, identity in (static_tokens or {}).items():
            _check_static_token(token)
            _check_role(identity.role)
            self._static[hashlib.sha256(token.encode("ascii")).digest()] = identity
        if not self._users and not self._static and external is None:
            raise AuthConfigError(
                "authentication needs at least one user, static token or external JWT issuer"
            )
        self.external = external
        self._grants = dict(grants or {})
        self.limiter = limiter if limiter is not None else LoginLimiter()
        self._basic_ttl = float(basic_cache_seconds)
        # keyed HMAC of "user\0password" -> (identity, monotonic expiry): never the password
        self._basic_ok: dict[bytes, tuple[Identity, float]] = {}
        self._basic_lock = threading.Lock()
        if not token_ttl > 0:
            raise AuthConfigError("token_ttl must be positive")
        self.token_ttl = float(token_ttl)
        self._clock = clock
        self.secret_is_ephemeral = False
        if secret is None:
            secret = os.environ.get(SECRET_ENV) or None
        if secret is None:
            secret = generate_secret()
            self.secret_is_ephemeral = True
            log.warning(
                "no %s set: bearer tokens are valid only in this server process", SECRET_ENV
            )
        self._secret = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
        if len(self._secret) < _MIN_SECRET_BYTES:
            raise AuthConfigError(f"the token secret must be at least {_MIN_SECRET_BYTES} bytes")
        self._tokens = OwnTokens(self._secret, clock)
        # unknown users still cost one PBKDF2 run, so timing does not reveal who exists
        slowest = max((u.iterations for u in self._users.values()), default=1)
        self._dummy_hash = hash_password(secrets.token_hex(8), iterations=slowest)

    @classmethod
    def from_files(
        cls,
        users_file: str | os.PathLike[str] | None = None,
        tokens_file: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> Authenticator:
        """Load a users file and/or a tokens file (see the module docstring for the formats)."""
        if users_file is None and tokens_file is None and kwargs.get("external") is None:
            raise AuthConfigError(
                "authentication needs a users file or a tokens file (or an external JWT issuer)"
            )
        grants: dict[str, Grants] = {}
        users = tokens = None
        if users_file is not None:
            users, user_grants = _load_users(users_file)
            grants.update(user_grants)
        if tokens_file is not None:
            tokens, token_grants = _load_tokens(tokens_file)
            for name, grant in token_grants.items():
                if grants.get(name, grant) != grant:
                    raise AuthConfigError(
                        f"user {name!r} has different grants in the users and tokens files"
                    )
                grants[name] = grant
        return cls(users, tokens, grants=grants, **kwargs)

    @property
    def secret(self) -> bytes:
        """The signing secret, for handing to worker processes."""
        return self._secret

    @property
    def has_users(self) -> bool:
        return bool(self._users)

    # -- credentials ------------------------------------------------------------------------

    def grants_of(self, identity: Identity) -> Grants | None:
        """The datasets ``identity`` is limited to (None: every dataset)."""
        return self._grants.get(identity.user)

    def check_password(self, user: str, password: str) -> Identity:
        """The identity of ``user`` if ``password`` is right, else an unauthenticated error.

        Rate-limited: while ``user`` (or the server) has failed too often, refused without
        checking; otherwise one password check at a time."""
        if not _USER_RE.fullmatch(user):  # no such user can exist: nothing to hash
            self.limiter.failed(None, password=False, how="malformed user name")
            raise flight.FlightUnauthenticatedError("invalid user name or password")
        self.limiter.begin_password_login(user)
        record = self._users.get(user)
        with self.limiter.hashing():
            ok = verify_password(password, record.password_hash if record else self._dummy_hash)
        if record is None or not ok:
            self.limiter.failed(user, password=True, how="password")
            raise flight.FlightUnauthenticatedError("invalid user name or password")
        self.limiter.succeeded(user)
        return Identity(record.name, record.role)

    def check_basic(self, user: str, password: str) -> Identity:
        """:meth:`check_password`, remembered for a while: for clients that send Basic
        credentials on every call."""
        key = hmac.new(self._secret, f"{user}\0{password}".encode(), hashlib.sha256).digest()
        now = time.monotonic()
        with self._basic_lock:
            hit = self._basic_ok.get(key)
        if hit is not None and now < hit[1]:
            return hit[0]
        identity = self.check_password(user, password)
        if self._basic_ttl > 0:
            with self._basic_lock:
                if len(self._basic_ok) >= _BASIC_CACHE_ENTRIES:
                    self._basic_ok = {k: v for k, v in self._basic_ok.items() if v[1] > now}
                    if len(self._basic_ok) >= _BASIC_CACHE_ENTRIES:
                        self._basic_ok.clear()
                self._basic_ok[key] = (identity, now + self._basic_ttl)
        return identity

    def issue_token(self, identity: Identity, ttl: float | None = None) -> str:
        """A bearer token for ``identity``, valid for ``ttl`` seconds in every process sharing
        the secret."""
        _check_role(identity.role)
        return self._tokens.issue(
            identity.user, identity.role, self.token_ttl if ttl is None else ttl
        )

    def verify_token(self, token: str) -> Identity:
        """The identity a bearer token stands for, or an unauthenticated error."""
        if len(token) > _MAX_TOKEN_CHARS:
            raise flight.FlightUnauthenticatedError("invalid bearer token")
        if looks_like_jwt(token):  # never a static token: those have no dots
            if self._tokens.is_own(token):
                return self._current(*self._tokens.verify(token))
            if self.external is not None:
                return Identity(*self.external.verify(token))
            raise flight.FlightUnauthenticatedError("invalid bearer token")
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found = None
        for known, identity in self._static.items():  # no early exit: constant time
            if hmac.compare_digest(known, digest):
                found = identity
        if found is None:
            raise flight.FlightUnauthenticatedError("invalid bearer token")
        return found

    def _current(self, user: str, role: str) -> Identity:
        """A signed token's identity as the users file has it now: a user removed from the
        file (and the server restarted) loses its tokens, a user demoted to read loses write
        at once."""
        if self._users:
            record = self._users.get(user)
            if record is None:
                raise flight.FlightUnauthenticatedError("invalid bearer token")
            if record.role != "write":
                role = record.role
        return Identity(user, role)

    # -- headers ----------------------------------------------------------------------------

    def authenticate(
        self, headers: Mapping[str, list[Any]], *, handshake: bool
    ) -> tuple[Identity, str | None]:
        """Check the ``authorization`` header of a call.

        Returns the caller's identity and, for Basic credentials, the bearer token to send
        back.  A handshake always checks the password; other calls carrying Basic credentials
        use :meth:`check_basic` (one password check per ``basic_cache_seconds``).
        """
        scheme, credentials = _authorization(headers)
        if scheme == "basic":
            if not self._users:
                raise flight.FlightUnauthenticatedError("password login is not enabled")
            user, password = _decode_basic(credentials)
            check = self.check_password if handshake else self.check_basic
            identity = check(user, password)
            return identity, self.issue_token(identity)
        if scheme == "bearer":
            try:
                return self.verify_token(credentials), None
            except flight.FlightUnauthenticatedError as exc:
                if not getattr(exc, "expired", False):
                    self.limiter.failed(self.claimed_user(headers), password=False, how="bearer")
                raise
        raise flight.FlightUnauthenticatedError(
            "unsupported authorization scheme (use Basic in the Handshake, then Bearer)"
        )

    def claimed_user(self, headers: Mapping[str, list[Any]]) -> str | None:
        """The user a call claims to be, unverified, for logging rejected calls."""
        try:
            scheme, credentials = _authorization(headers)
            if scheme == "basic":
                return _decode_basic(credentials)[0]
            if scheme == "bearer" and looks_like_jwt(credentials):
                user = unverified_claims(credentials).get("sub")
                return user if isinstance(user, str) else None
        except (flight.FlightError, ValueError, jwt.PyJWTError):
            return None
        return None


def _authorization(headers: Mapping[str, list[Any]]) -> tuple[str, str]:
    values = headers.get("authorization") or []
    if not values:
        raise flight.FlightUnauthenticatedError(
            "authentication required: Handshake with Basic credentials, then send "
            "'authorization: Bearer <token>'"
        )
    if len(set(values)) > 1:
        raise flight.FlightUnauthenticatedError("conflicting authorization headers")
    value = values[0]
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    scheme, _, credentials = value.strip().partition(" ")
    return scheme.lower(), credentials.strip()


def _decode_basic(credentials: str) -> tuple[str, str]:
    # Go's Flight client (the ADBC driver) sends base64 without '=' padding; accept both
    bare = credentials.rstrip("=")
    try:
        if len(bare) % 4 == 1 or len(credentials) - len(bare) > 2:
            raise ValueError("bad base64 length")
        raw = base64.b64decode(bare + "=" * (-len(bare) % 4), validate=True)
        decoded = raw.decode("utf-8")
    except (ValueError, binascii.Error, UnicodeError):
        raise flight.FlightUnauthenticatedError("malformed Basic credentials") from None
    user, colon, password = decoded.partition(":")
    if not colon or not user:
        raise flight.FlightUnauthenticatedError("malformed Basic credentials")
    return user, password


def _check_user_name(name: str) -> None:
    if not isinstance(name, str) or not _USER_RE.fullmatch(name):
        raise AuthConfigError(f"bad user name {name!r}: 1-128 characters, no ':' or spaces")


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise AuthConfigError(f"unknown role {role!r}: expected one of {', '.join(ROLES)}")


def _check_static_token(token: str) -> None:
    if not isinstance(token, str) or not _STATIC_TOKEN_RE.fullmatch(token):
        raise AuthConfigError("a static token must be printable ASCII without spaces")
    if len(token) < _MIN_STATIC_TOKEN_CHARS:
        raise AuthConfigError(f"a static token must be at least {_MIN_STATIC_TOKEN_CHARS} chars")
    if "." in token:
        raise AuthConfigError("static tokens must not contain '.' (reserved for signed JWTs)")


# ---------------------------------------------------------------------------------------------
# files


def _config_lines(path: str | os.PathLike[str], what: str) -> Iterable[tuple[int, str]]:
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > _MAX_FILE_BYTES:
            raise AuthConfigError(f"{what} is {size} bytes, larger than allowed", path=str(p))
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AuthConfigError(f"{what} not found", path=str(p)) from None
    except (OSError, UnicodeError) as exc:
        raise AuthConfigError(f"cannot read {what}: {exc}", path=str(p)) from None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line and not line.startswith("#"):
            yield number, line


def load_users_file(path: str | os.PathLike[str]) -> dict[str, tuple[str, str]]:
    """Parse ``user:password-hash[:role[:grant]]`` lines into ``{user: (hash, role)}``."""
    return _load_users(path)[0]


def load_tokens_file(path: str | os.PathLike[str]) -> dict[str, Identity]:
    """Parse ``TOKEN [USER [ROLE [GRANT]]]`` lines; a token without a user is named after its
    line."""
    return _load_tokens(path)[0]


def _parse_grant(text: str) -> Grants:
    try:
        return Grants.parse(text)
    except ValueError as exc:
        raise AuthConfigError(str(exc)) from None


def _load_users(path) -> tuple[dict[str, tuple[str, str]], dict[str, Grants]]:
    users: dict[str, tuple[str, str]] = {}
    grants: dict[str, Grants] = {}
    for number, line in _config_lines(path, "users file"):
        try:
            parts = line.split(":")
            if len(parts) not in (2, 3, 4):
                raise AuthConfigError("expected user:password-hash[:role[:grant]]")
            name, password_hash = parts[0], parts[1]
            role = parts[2] if len(parts) >= 3 and parts[2] else DEFAULT_ROLE
            _check_user_name(name)
            _check_role(role)
            _parse_hash(password_hash)
            if name in users:
                raise AuthConfigError(f"user {name!r} appears twice")
            if len(parts) == 4:
                grants[name] = _parse_grant(parts[3])
        except AuthConfigError as exc:
            raise AuthConfigError(f"line {number}: {exc.problem}", path=str(path)) from None
        users[name] = (password_hash, role)
    return users, grants


def _load_tokens(path) -> tuple[dict[str, Identity], dict[str, Grants]]:
    tokens: dict[str, Identity] = {}
    grants: dict[str, Grants] = {}
    for number, line in _config_lines(path, "tokens file"):
        try:
            parts = line.split()
            if len(parts) > 4:
                raise AuthConfigError("expected TOKEN [USER [ROLE [GRANT]]]")
            token = parts[0]
            user = parts[1] if len(parts) > 1 else f"token-line-{number}"
            role = parts[2] if len(parts) > 2 else DEFAULT_ROLE
            _check_static_token(token)
            _check_user_name(user)
            _check_role(role)
            if token in tokens:
                raise AuthConfigError("the same token appears twice")
            if len(parts) == 4:
                grant = _parse_grant(parts[3])
                if grants.get(user, grant) != grant:
                    raise AuthConfigError(f"user {user!r} has different grants on two lines")
                grants[user] = grant
        except AuthConfigError as exc:
            raise AuthConfigError(f"line {number}: {exc.problem}", path=str(path)) from None
        tokens[token] = Identity(user, role)
    return tokens, grants


# ---------------------------------------------------------------------------------------------
# pyarrow plumbing


class HandshakeAuthHandler(flight.ServerAuthHandler):
    """Makes pyarrow accept the ``Handshake`` RPC; the middleware does the real checks.

    pyarrow calls ``is_valid`` with the legacy ``auth-token-bin`` header *before* any
    middleware runs, so it cannot decide anything useful and accepts everything.
    """

    def authenticate(self, outgoing: flight.ServerAuthSender, incoming: flight.ServerAuthReader):
        return None

    def is_valid(self, token: bytes) -> str:
        return ""


@runtime_checkable
class AuthObserver(Protocol):
    """A middleware factory that wants to hear the auth decision of every call.

    pyarrow bundles all Python middleware into one, so when the auth factory rejects a call by
    raising in ``start_call``, the instances other factories already made for that call are
    dropped without ``call_completed``: metrics and request logs would never see failed
    logins.  The auth factory therefore reports every outcome to its observers (same thread as
    the call, right after they started their instance for it: ``headers`` is the very dict they
    received).
    """

    def auth_outcome(
        self,
        info: flight.CallInfo,
        headers: Mapping[str, list[Any]],
        user: str | None,
        error: Exception | None,
    ) -> None: ...


class _AuthMiddleware(flight.ServerMiddleware):
    def __init__(self, identity: Identity, token: str | None, grants: Grants | None = None):
        self.identity = identity
        self.grants = grants
        self._token = token

    def sending_headers(self) -> dict[str, str] | None:
        # only calls with Basic credentials (the handshake, or any call) answer with a token
        return {"authorization": f"Bearer {self._token}"} if self._token else None

    def call_completed(self, exception: Exception | None) -> None:
        return None


class AuthMiddlewareFactory(flight.ServerMiddlewareFactory):
    """Authenticates every call (Handshake included) from its ``authorization`` header."""

    def __init__(self, authenticator: Authenticator, observers: Iterable[AuthObserver] = ()):
        self.authenticator = authenticator
        self.observers = tuple(observers)

    def start_call(self, info: flight.CallInfo, headers: dict[str, list[Any]]) -> _AuthMiddleware:
        handshake = info.method == flight.FlightMethod.HANDSHAKE
        try:
            identity, token = self.authenticator.authenticate(headers, handshake=handshake)
        except flight.FlightError as exc:
            self._tell(info, headers, self.authenticator.claimed_user(headers), exc)
            log.debug("rejected %s: %s", info.method.name, exc)
            raise
        except Exception as exc:  # a bug here must not look like bad credentials
            log.exception("authentication failed internally")
            error = flight.FlightInternalError(f"authentication failed internally: {exc}")
            self._tell(info, headers, None, error)
            raise error from exc
        self._tell(info, headers, identity.user, None)
        return _AuthMiddleware(identity, token, self.authenticator.grants_of(identity))

    def _tell(self, info, headers, user, error) -> None:
        for observer in self.observers:
            try:
                observer.auth_outcome(info, headers, user, error)
            except Exception:  # observers must never change the auth decision
                log.exception("auth observer %r failed", observer)


def auth_server_options(
    authenticator: Authenticator,
    observers: Mapping[str, flight.ServerMiddlewareFactory] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``FlightServerBase.__init__`` that turn authentication on.

    ``observers`` are the other middleware (e.g. ``{"requestlog": ..., "metrics": ...}``); they
    are placed *before* the auth middleware, and those with an ``auth_outcome`` method are told
    about rejected calls (see :class:`AuthObserver`).  Pass the returned ``middleware`` dict
    whole; add nothing after it.
    """
    observers = dict(observers or {})
    if AUTH_MIDDLEWARE_KEY in observers:
        raise ValueError(f"middleware key {AUTH_MIDDLEWARE_KEY!r} is reserved for auth")
    watching = [f for f in observers.values() if isinstance(f, AuthObserver)]
    middleware = {**observers, AUTH_MIDDLEWARE_KEY: AuthMiddlewareFactory(authenticator, watching)}
    return {"auth_handler": HandshakeAuthHandler(), "middleware": middleware}


def current_user(context: flight.ServerCallContext) -> Identity | None:
    """The authenticated caller, or None when the server runs without authentication."""
    middleware = context.get_middleware(AUTH_MIDDLEWARE_KEY)
    return None if middleware is None else middleware.identity


def current_grants(context: flight.ServerCallContext) -> Grants | None:
    """The datasets the caller is limited to (None: all, or auth is off)."""
    middleware = context.get_middleware(AUTH_MIDDLEWARE_KEY)
    return None if middleware is None else middleware.grants


def require_write(context: flight.ServerCallContext) -> None:
    """Refuse a data-changing call from a read-only user (no-op when auth is off)."""
    identity = current_user(context)
    if identity is not None and identity.role != "write":
        raise flight.FlightUnauthorizedError(
            f"user {identity.user!r} has read-only access; this call needs the write role"
        )


# ---------------------------------------------------------------------------------------------
# python -m flight_server.auth


def _read_password(from_stdin: bool) -> str:
    if from_stdin or not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise SystemExit("error: the passwords differ")
    if not password:
        raise SystemExit("error: empty password")
    return password


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flight_server.auth", description="make lines for the auth files"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("hash", help="hash a password (read from the terminal or stdin)")
    p.add_argument("--user", help="print a whole users-file line for this user")
    p.add_argument("--role", choices=ROLES, help="role for the users-file line")
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS)
    p.add_argument("--stdin", action="store_true", help="read the password from stdin")
    grant_help = "limit to dataset prefixes: 'read=PREFIX,...;write=PREFIX,...'"
    p.add_argument("--grant", help=grant_help)
    p = sub.add_parser("token", help="make a random static token (a tokens-file line)")
    p.add_argument("--user")
    p.add_argument("--role", choices=ROLES)
    p.add_argument("--grant", help=grant_help)
    sub.add_parser("secret", help=f"make a random token-signing secret for {SECRET_ENV}")
    args = parser.parse_args(argv)
    try:
        if args.command in ("hash", "token"):
            if (args.role or args.grant) and not args.user:
                parser.error("--role and --grant need --user")
            if args.user:
                _check_user_name(args.user)
            grant = str(_parse_grant(args.grant)) if args.grant else None
            role = args.role or (DEFAULT_ROLE if grant else None)
        if args.command == "hash":
            encoded = hash_password(_read_password(args.stdin), iterations=args.iterations)
            fields = [args.user, encoded, role, grant] if args.user else [encoded]
            print(":".join(f for f in fields if f))
        elif args.command == "token":
            fields = [secrets.token_urlsafe(32), args.user, role, grant]
            print(" ".join(f for f in fields if f))
        else:
            print(generate_secret())
    except AuthConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
