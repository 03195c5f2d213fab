"""S3 and S3-compatible object storage, through ``obstore`` (the Python bindings of Rust's
``object_store``, the engine pylance itself uses).

obstore gives conditional put (``mode="create"``, sent as ``If-None-Match: *``), ranged
reads issued concurrently, multipart uploads and one-request listings with a delimiter.
Options use pylance's names (``aws_access_key_id``, ``endpoint``, ``allow_http``, ...); the
standard ``AWS_*`` environment variables fill in whatever the options leave out."""

from __future__ import annotations

import builtins
import functools
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, cast

from ..errors import InvalidArgumentError, LanceIOError, ObjectNotFoundError, first_line
from .base import ObjectMeta, ObjectStore, ObjectWriter, coalesce, split_groups

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config

T = TypeVar("T")

# options that configure the HTTP client, not the store (pylance name -> obstore name)
_CLIENT_OPTIONS = {
    "allow_http": "allow_http",
    "allow_invalid_certificates": "allow_invalid_certificates",
    "timeout": "timeout",
    "request_timeout": "timeout",
    "connect_timeout": "connect_timeout",
    "user_agent": "user_agent",
    "proxy_url": "proxy_url",
}
_BOOL_CLIENT_OPTIONS = {"allow_http", "allow_invalid_certificates"}
# pylance options about its own IO scheduling: meaningful there, nothing to configure here
_IGNORED = {
    "client_retry_timeout",
    "download_retry_count",
    "new_table_enable_stable_row_ids",
    "dynamodb_endpoint",  # the external manifest store's, not S3's
}
# spellings object_store accepts for the same key (pylance passes them through unchanged)
_ALIASES = {
    "aws_endpoint": "endpoint",
    "aws_endpoint_url": "endpoint",
    "endpoint_url": "endpoint",
    "aws_region": "region",
    "aws_access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key",
    "aws_session_token": "token",
    "session_token": "token",
    "aws_virtual_hosted_style_request": "virtual_hosted_style_request",
}
# what a multipart part is; smaller objects go up in one PUT
PART_SIZE = 8 * 1024 * 1024


def _truthy(value: object) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def split_options(options: dict[str, str]) -> tuple[dict, dict, dict]:
    """pylance-style ``storage_options`` as obstore's (config, client options, retry)."""
    config: dict[str, str] = {}
    client: dict[str, object] = {}
    retry: dict[str, int] = {}
    for raw_key, value in options.items():
        key = str(raw_key).lower()
        if key in _IGNORED:
            continue
        if key in _CLIENT_OPTIONS:
            name = _CLIENT_OPTIONS[key]
            client[name] = _truthy(value) if name in _BOOL_CLIENT_OPTIONS else str(value)
        elif key == "client_max_retries":
            try:
                retry["max_retries"] = int(value)
            except ValueError as exc:
                raise InvalidArgumentError(
                    f"client_max_retries must be an integer: {value!r}"
                ) from exc
        else:
            config[_ALIASES.get(key, key)] = str(value)
    return config, client, retry


def _call(uri: str, action: str, fn: Callable[[], T]) -> T:
    """Run one obstore call, turning its errors into the project's."""
    try:
        return fn()
    except FileNotFoundError as exc:
        raise ObjectNotFoundError("file not found", path=uri) from exc
    except Exception as exc:  # obstore raises its own hierarchy (BaseError) and OSError
        if isinstance(exc, LanceIOError):
            raise
        first = first_line(exc)
        raise LanceIOError(f"cannot {action}: {first}", path=uri) from exc


class _S3Writer(ObjectWriter):
    """Buffers to a spooled temporary file, then uploads on commit (multipart for large
    objects), so an aborted write leaves nothing in the bucket."""

    def __init__(self, store: S3Store, key: str):
        self._store = store
        self._key = key
        self._buf = tempfile.SpooledTemporaryFile(max_size=PART_SIZE)  # noqa: SIM115
        self._size = 0

    def write(self, data: bytes | memoryview) -> None:
        self._buf.write(data)
        self._size += len(data)

    def commit(self) -> None:
        import obstore

        self._buf.seek(0)
        try:
            _call(
                self._store.uri(self._key),
                "write",
                lambda: obstore.put(
                    self._store.client,
                    self._key,
                    self._buf,
                    use_multipart=self._size > PART_SIZE,
                    chunk_size=PART_SIZE,
                ),
            )
        finally:
            self._buf.close()
        parts = max(1, -(-self._size // PART_SIZE)) + (2 if self._size > PART_SIZE else 0)
        self._store.count(requests=parts, written=self._size)

    def abort(self) -> None:
        self._buf.close()


class S3Store(ObjectStore):
    """One bucket.  Keys are object keys inside it."""

    scheme = "s3"
    remote = True
    coalesce_gap = 256 * 1024
    max_concurrency = 8

    def __init__(self, bucket: str, options: dict[str, str] | None = None):
        super().__init__()
        from obstore.store import S3Store as _ObS3Store

        self.bucket = bucket
        config, client, retry = split_options(options or {})
        try:
            self.client = _ObS3Store(
                bucket,
                config=cast("S3Config", config),
                client_options=cast("ClientConfig", client) or None,
                retry_config=cast("RetryConfig", retry) or None,
            )
        except Exception as exc:
            first = first_line(exc)
            raise InvalidArgumentError(
                f"bad S3 storage options for s3://{bucket}: {first}"
            ) from exc

    def get(self, key: str) -> bytes:
        import obstore

        data = _call(self.uri(key), "read", lambda: bytes(obstore.get(self.client, key).bytes()))
        self.count(read=len(data))
        return data

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        import obstore

        data = _call(
            self.uri(key),
            "read",
            lambda: bytes(obstore.get_range(self.client, key, start=offset, length=length)),
        )
        self.count(read=len(data))
        return data

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Coalesced here (so the request count is known), fetched concurrently by obstore."""
        import obstore

        if not ranges:
            return []
        groups = coalesce(ranges, self.coalesce_gap)
        blobs = _call(
            self.uri(key),
            "read",
            lambda: obstore.get_ranges(
                self.client,
                key,
                starts=[s for s, _, _ in groups],
                ends=[e for _, e, _ in groups],
                coalesce=0,
            ),
        )
        self.count(requests=len(groups), read=sum(e - s for s, e, _ in groups))
        return split_groups(ranges, groups, [bytes(b) for b in blobs])

    def head(self, key: str) -> ObjectMeta | None:
        import obstore

        self.count()
        try:
            meta = _call(self.uri(key), "stat", lambda: obstore.head(self.client, key))
        except ObjectNotFoundError:
            return None
        return ObjectMeta(
            key, int(meta["size"]), meta["last_modified"].timestamp(), meta.get("e_tag")
        )

    def list(self, prefix: str) -> list[ObjectMeta]:
        import obstore

        base = prefix.strip("/")

        def run() -> list[ObjectMeta]:
            out = []
            for chunk in obstore.list(self.client, base + "/" if base else None, chunk_size=1000):
                self.count()
                out += [
                    ObjectMeta(m["path"], int(m["size"]), m["last_modified"].timestamp())
                    for m in chunk
                ]
            return out

        return _call(self.uri(base), "list", run)

    def list_dir(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        """One LIST with a delimiter: objects and common prefixes directly under ``prefix``."""
        import obstore

        base = prefix.strip("/")
        self.count()
        found = _call(
            self.uri(base), "list", lambda: obstore.list_with_delimiter(self.client, base or None)
        )
        files = [m["path"].rsplit("/", 1)[-1] for m in found["objects"]]
        dirs = [p.rstrip("/").rsplit("/", 1)[-1] for p in found["common_prefixes"]]
        return sorted(files), sorted(dirs)

    def list_names(self, prefix: str) -> builtins.list[str]:
        """One LIST with a delimiter (the latest version is found in one request)."""
        files, dirs = self.list_dir(prefix)
        return sorted(files + dirs)

    def put(self, key: str, data: bytes) -> None:
        import obstore

        _call(self.uri(key), "write", lambda: obstore.put(self.client, key, data))
        self.count(written=len(data))

    def put_if_not_exists(self, key: str, data: bytes) -> bool:
        """A conditional PUT (``If-None-Match: *``); the store refuses an existing key."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        self.count(written=len(data))
        try:
            obstore.put(self.client, key, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        except Exception as exc:
            raise LanceIOError(f"cannot create: {exc}", path=self.uri(key)) from exc
        return True

    def create(self, key: str) -> ObjectWriter:
        return _S3Writer(self, key)

    def delete(self, key: str, *, missing_ok: bool = False) -> None:
        import obstore

        if not missing_ok and self.head(key) is None:
            raise ObjectNotFoundError("file not found", path=self.uri(key))
        self.count()
        _call(self.uri(key), "remove", lambda: obstore.delete(self.client, key))

    def delete_prefix(self, prefix: str) -> int:
        import obstore

        found = self.list(prefix)
        keys = [m.key for m in found]
        for i in range(0, len(keys), 1000):  # S3's DeleteObjects takes 1000 keys
            batch = keys[i : i + 1000]
            self.count()
            _call(self.uri(prefix), "remove", functools.partial(obstore.delete, self.client, batch))
        return sum(m.size for m in found)

    def copy(self, src: str, dst: str) -> None:
        import obstore

        self.count()
        _call(self.uri(src), "copy", lambda: obstore.copy(self.client, src, dst))

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"
