"""``do_put``: a stream of batches becomes new fragments, committed in one transaction.

Batches are encoded into data files as they arrive (rolling at ``max_rows_per_file``), so
memory stays bounded whatever the stream's size.  Only a stream that ends cleanly commits,
with the datasets layer's conflict-checked transaction; a failed, cancelled or refused stream
removes every file it wrote (and a dataset directory it created).  ``stage`` writes the
fragments without committing and hands their metadata back, for distributed writers that
commit many stages at once (``commit_staged``).

Idempotency: the key is stored in the committed transaction's properties, so a retry that
reaches any server process, even after a restart, finds it and commits nothing more.  The
newest ``IDEMPOTENCY_WINDOW`` versions are searched.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from lance_format.errors import CommitConflictError
from lance_format.pb import transaction_pb2
from lance_format.schema import LanceSchema
from lance_format.table import commit, manifest, paths, write

from .catalog import Catalog
from .errors import AlreadyExists, BadRequest
from .query import non_negative_int

IDEMPOTENCY_KEY = "lance_flight.idempotency_key"
ROWS_PROPERTY = "lance_flight.rows"
IDEMPOTENCY_WINDOW = 100
MODES = ("create", "append", "overwrite")
_PUT_KEYS = {"dataset", "mode", "data_storage_version", "max_rows_per_file", "idempotency_key"}
_PUT_KEYS |= {"stage"}


@dataclass
class PutOptions:
    dataset: str
    mode: str = "append"
    data_storage_version: str | None = None
    max_rows_per_file: int = write.DEFAULT_MAX_ROWS_PER_FILE
    idempotency_key: str | None = None
    stage: bool = False


def parse_put(cmd: dict) -> PutOptions:
    unknown = sorted(set(cmd) - _PUT_KEYS)
    if unknown:
        raise BadRequest(f"unknown key(s) {unknown} in the put command; known: {sorted(_PUT_KEYS)}")
    name = cmd.get("dataset")
    if not isinstance(name, str) or not name:
        raise BadRequest("the put command needs 'dataset': the dataset's name")
    mode = cmd.get("mode", "append")
    if mode not in MODES:
        raise BadRequest(f"'mode' must be one of {list(MODES)}, got {mode!r}")
    version = cmd.get("data_storage_version")
    if version is not None and version not in write.WRITABLE_VERSIONS:
        raise BadRequest(
            f"'data_storage_version' must be one of {sorted(write.WRITABLE_VERSIONS)}, "
            f"got {version!r}"
        )
    key = cmd.get("idempotency_key")
    if key is not None and (not isinstance(key, str) or not 0 < len(key) <= 256):
        raise BadRequest("'idempotency_key' must be a string of 1 to 256 characters")
    stage = cmd.get("stage", False)
    if not isinstance(stage, bool):
        raise BadRequest(f"'stage' must be true or false, got {stage!r}")
    rows = non_negative_int(cmd, "max_rows_per_file", positive=True)
    return PutOptions(name, mode, version, rows or write.DEFAULT_MAX_ROWS_PER_FILE, key, stage)


def find_idempotent(root: str, key: str) -> dict | None:
    """The earlier commit carrying ``key`` among the newest versions, if any."""
    versions = paths.list_versions(root) if os.path.isdir(root) else []
    for entry in reversed(versions[-IDEMPOTENCY_WINDOW:]):
        txn = manifest.read_manifest(entry.path).transaction
        if txn is not None and txn.transaction_properties.get(IDEMPOTENCY_KEY) == key:
            rows = int(txn.transaction_properties.get(ROWS_PROPERTY, "0"))
            return {"version": entry.version, "rows_written": rows, "duplicate": True}
    return None


def aligned(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with 8-byte aligned buffers: batches from a do_put stream may point into
    the gRPC message at any offset, and native kernels assume alignment (copied only then)."""
    for col in batch.columns:
        if any(b is not None and b.address % 8 for b in _buffers(col)):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batch.schema) as w:
                w.write_batch(batch)
            return pa.ipc.open_stream(sink.getvalue()).read_next_batch()
    return batch


def _buffers(arr: pa.Array) -> list:
    return arr.buffers()


def ingest(
    catalog: Catalog,
    opts: PutOptions,
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
    *,
    on_rows: Callable[[int, int], None] | None = None,
) -> dict:
    """Write and (unless staged) commit the stream; returns the PutResult metadata."""
    root = catalog.path_of(opts.dataset)
    if opts.idempotency_key and not opts.stage:
        earlier = find_idempotent(root, opts.idempotency_key)
        if earlier is not None:
            for _ in batches:  # drain: the client is still sending
                pass
            return earlier
    exists = catalog.exists(opts.dataset)
    if opts.mode == "create" and exists:
        raise AlreadyExists(f"dataset {opts.dataset!r} already exists (use mode 'append')")
    created_dir = not os.path.exists(root)
    counted = {"rows": 0, "bytes": 0}

    def counting() -> Iterator[pa.RecordBatch]:
        for b in batches:
            counted["rows"] += b.num_rows
            counted["bytes"] += b.nbytes
            if on_rows is not None:
                on_rows(b.num_rows, b.nbytes)
            yield aligned(b)

    current = catalog.open(opts.dataset) if exists else None
    appending = opts.mode == "append" and current is not None
    if appending:
        lance_schema = current.lance_schema
        version = current.data_storage_version
        write.check_schema(current.schema, schema)
    else:
        lance_schema = LanceSchema.from_arrow(schema)
        version = opts.data_storage_version or (
            current.data_storage_version if current is not None else "stable"
        )
    if opts.data_storage_version and appending and opts.data_storage_version != version:
        raise BadRequest(
            f"dataset {opts.dataset!r} stores Lance {version} files; cannot append "
            f"{opts.data_storage_version}"
        )
    if version not in write.WRITABLE_VERSIONS:
        raise BadRequest(f"cannot write Lance file version {version} (writable: 2.0, 2.1, 2.2)")
    fragments = []
    try:
        os.makedirs(root, exist_ok=True)
        fragments = write.write_fragments(
            pa.RecordBatchReader.from_batches(schema, counting()),
            root,
            lance_schema,
            max_rows_per_file=opts.max_rows_per_file,
            data_storage_version=version,
        )
        if opts.stage:
            return {
                "staged": True,
                "rows_written": counted["rows"],
                "fragments": [write.fragment_to_json(f) for f in fragments],
                "schema": base64.b64encode(schema.serialize().to_pybytes()).decode(),
                "data_storage_version": version,
            }
        read_version = current.version if current is not None else 0
        if appending:
            txn = commit.new_transaction(
                read_version, append=transaction_pb2.Transaction.Append(fragments=fragments)
            )
        else:
            txn = commit.new_transaction(
                read_version, overwrite=overwrite_op(fragments, lance_schema, schema)
            )
        if opts.idempotency_key:
            txn.transaction_properties[IDEMPOTENCY_KEY] = opts.idempotency_key
        txn.transaction_properties[ROWS_PROPERTY] = str(counted["rows"])
        try:
            m = commit.commit(root, txn, data_storage_version=None if appending else version)
        except CommitConflictError:
            if opts.idempotency_key:  # a concurrent retry of the same put won
                earlier = find_idempotent(root, opts.idempotency_key)
                if earlier is not None:
                    write.remove_fragment_files(root, fragments)
                    return earlier
            raise
        return {"version": m.version, "rows_written": counted["rows"]}
    except BaseException:
        write.remove_fragment_files(root, fragments)
        if created_dir:
            shutil.rmtree(root, ignore_errors=True)
        raise


def overwrite_op(fragments, lance_schema: LanceSchema, schema: pa.Schema):
    op = transaction_pb2.Transaction.Overwrite(fragments=fragments, schema=lance_schema.to_protos())
    for k, v in (schema.metadata or {}).items():
        op.schema_metadata[k.decode() if isinstance(k, bytes) else k] = v
    return op


def staged_schema(text: str) -> pa.Schema:
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))
    except (ValueError, pa.ArrowException) as exc:
        raise BadRequest(f"'schema' is not a base64 Arrow IPC schema: {exc}") from None
