"""``do_put``: a stream of batches becomes new fragments, committed in one transaction.

Batches are encoded into data files as they arrive (rolling at ``max_rows_per_file``), so
memory stays bounded whatever the stream's size.  Only a stream that ends cleanly commits,
with the datasets layer's conflict-checked transaction; a failed, cancelled or refused stream
removes every file it wrote (and a dataset directory it created).  ``stage`` writes the
fragments without committing and hands their metadata back, for distributed writers that
commit many stages at once (``commit_staged``).  A staged put may name its ``job``: it then
records each data file's name in the job's registry (``lance_format.table.staging``) before
creating the file, and checks the job before writing anything, at every new file and at the
end of its stream: once the job is aborted (``discard_staged``) or committed, the put removes
its files and fails with FAILED_PRECONDITION, so a writer its driver forgot cannot leave
files behind.

The write itself, with its cleanup, create-race handling and idempotency keys, is the
library's (:func:`lance_format.service_write.write_version`, behind
``lance_format.write_dataset``); this module adapts the wire stream to it (casts to the
dataset's types, buffer alignment, row counting) and maps its outcome to the PutResult.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_format import service_write, staging, storage
from lance_format.errors import DatasetExistsError, SchemaError, UnsupportedError
from lance_format.schema import LanceSchema
from lance_format.validation import check_arrays
from lance_format.version import DEFAULT_VERSION, LanceFileVersion, writable

from . import permissions
from .catalog import Catalog
from .errors import AlreadyExists, BadRequest, FailedPrecondition
from .merge_put import MergeOptions, merge_put


@dataclass
class PutOptions:
    dataset: str
    mode: str = "append"
    data_storage_version: str | LanceFileVersion | None = None
    max_rows_per_file: int = service_write.DEFAULT_MAX_ROWS_PER_FILE
    idempotency_key: str | None = None
    stage: bool = False
    job: str | None = None
    merge: MergeOptions | None = None  # mode "merge": the stream is a merge_insert's source


def writable_version(value: object) -> LanceFileVersion:
    """A client's ``data_storage_version``, if writable; a BadRequest naming the writable
    versions otherwise."""
    try:
        if not isinstance(value, str):
            raise UnsupportedError(f"'data_storage_version' must be a string, got {value!r}")
        return writable(value)
    except UnsupportedError as exc:
        raise BadRequest(f"'data_storage_version': {exc.problem}") from None


def check_job_running(job: staging.StagingJob) -> None:
    """FAILED_PRECONDITION when ``job`` was aborted or committed: nothing more may join it."""
    state = job.state()
    if state is not None:
        raise FailedPrecondition(
            f"staging job {job.job!r} was already {state}: nothing more can be staged in it "
            "or committed from it (a put's files are removed)"
        )


def _outcome(outcome: service_write.WriteOutcome) -> dict:
    out = {"version": outcome.version, "rows_written": outcome.rows_written}
    return {**out, "duplicate": True} if outcome.duplicate else out


def _plain(t: pa.DataType) -> pa.DataType:
    """``t`` with its string/binary/list representation variants (view, large) unified."""
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(t.value_field.with_type(_plain(t.value_type)))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_plain(t.value_type)), t.list_size)
    if pa.types.is_struct(t):
        return pa.struct(
            [t.field(i).with_type(_plain(t.field(i).type)) for i in range(t.num_fields)]
        )
    return t


def needs_cast(target: pa.Schema, got: pa.Schema) -> bool:
    """Whether the stream's batches must be cast to the dataset's types: a representation
    change only (``string_view`` or ``large_string`` data for a ``string`` column, nested
    fields that differ in nullability alone, ...).
    Other differences (names, order, types) are a SchemaError, raised before anything is
    written."""
    if target.names != got.names:
        raise SchemaError(
            f"the data's columns {got.names} differ from the dataset's {target.names}"
        )
    cast = False
    for a, b in zip(target, got, strict=True):
        if a.type.equals(b.type):
            continue
        if not _plain(service_write.comparable_type(a.type)).equals(
            _plain(service_write.comparable_type(b.type))
        ):
            raise SchemaError(f"column {a.name!r}: the dataset has {a.type}, the data has {b.type}")
        cast = True
    return cast


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` cast to ``target``'s types (see :func:`needs_cast`)."""
    try:
        arrays = [col.cast(f.type) for col, f in zip(batch.columns, target, strict=True)]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(f"the data cannot be stored as {target}: {exc}") from None
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def aligned(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with 8-byte aligned buffers: batches from a do_put stream point into the
    gRPC message at any offset (pyarrow 26 hands them out 1 byte off), and native code
    assumes alignment.  Only misaligned buffers are copied; flat columns buffer by buffer
    (a memcpy), nested or dictionary ones through an IPC round trip of that column."""
    columns = batch.columns
    out = [_aligned_array(col) for col in columns]
    if all(a is b for a, b in zip(out, columns, strict=True)):
        return batch
    return pa.RecordBatch.from_arrays(out, schema=batch.schema)


def _misaligned(buf: pa.Buffer | None) -> bool:
    return buf is not None and buf.address % 8 != 0


def _aligned_array(arr: pa.Array) -> pa.Array:
    buffers = arr.buffers()
    if not any(_misaligned(b) for b in buffers):
        return arr
    t = arr.type
    flat = t.num_fields == 0 and not (
        pa.types.is_dictionary(t) or pa.types.is_string_view(t) or pa.types.is_binary_view(t)
    )
    if flat:
        copied = [_copy(b) if _misaligned(b) else b for b in buffers]
        return pa.Array.from_buffers(t, len(arr), copied, arr.null_count, arr.offset)
    # a whole IPC stream: a bare record batch message would lose the dictionaries
    one = pa.RecordBatch.from_arrays([arr], names=["c"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, one.schema) as writer:
        writer.write_batch(one)
    return pa.ipc.open_stream(sink.getvalue()).read_next_batch().column(0)


def _copy(buf: pa.Buffer) -> pa.Buffer:
    """A copy of ``buf`` in a fresh (64-byte aligned) allocation."""
    out = pa.allocate_buffer(buf.size)
    np.frombuffer(out, dtype=np.uint8)[:] = np.frombuffer(buf, dtype=np.uint8)
    return out


def ingest(
    catalog: Catalog,
    opts: PutOptions,
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
    *,
    on_rows: Callable[[int, int], None] | None = None,
) -> dict:
    """Write and (unless staged) commit the stream; returns the PutResult metadata."""
    if opts.merge is not None:
        return merge_put(catalog, opts.dataset, opts.merge, schema, batches, on_rows)
    root = catalog.path_of(opts.dataset)
    permissions.check_write(opts.dataset)
    if opts.idempotency_key and not opts.stage:
        earlier = service_write.find_idempotent(root, opts.idempotency_key)
        if earlier is not None:
            for _ in batches:  # drain: the client is still sending
                pass
            return _outcome(earlier)
    exists = catalog.exists(opts.dataset)
    if opts.mode == "create" and exists:
        raise AlreadyExists(f"dataset {opts.dataset!r} already exists (use mode 'append')")
    current = catalog.open(opts.dataset) if exists else None
    appending = opts.mode == "append" and current is not None
    requested = writable_version(opts.data_storage_version) if opts.data_storage_version else None
    if current is not None and appending:
        lance_schema = current.lance_schema
        stored = current.data_storage_version
        target = current.schema
    else:
        lance_schema = LanceSchema.from_arrow(schema)
        stored = requested or (
            current.data_storage_version if current is not None else DEFAULT_VERSION
        )
        target = lance_schema.to_dataset_arrow().with_metadata(schema.metadata)
    must_cast = needs_cast(target, schema)
    if requested and appending and requested != stored:
        raise BadRequest(
            f"dataset {opts.dataset!r} stores Lance {stored} files; cannot append {requested}"
        )
    version = writable_version(stored)

    def adapted() -> Iterator[pa.RecordBatch]:
        for b in batches:
            if on_rows is not None:
                on_rows(b.num_rows, b.nbytes)
            check_arrays(b)  # before a cast or a copy reads its offsets
            if must_cast:  # first: a cast makes new (aligned) buffers of its own
                b = conform(b, target)
            yield aligned(b)

    stream = adapted()
    if opts.stage:
        read_version = current.version if current is not None else 0
        return _stage(root, opts, lance_schema, target, stream, read_version, version)
    if current is not None and appending:  # nothing arrived: nothing to commit
        first = next((b for b in stream if b.num_rows), None)
        if first is None:
            return {"version": current.version, "rows_written": 0}
        stream = itertools.chain([first], stream)
    try:
        outcome = service_write.write_version(
            pa.RecordBatchReader.from_batches(target, stream),
            root,
            mode=opts.mode,
            max_rows_per_file=opts.max_rows_per_file,
            data_storage_version=None if appending else version,
            idempotency_key=opts.idempotency_key,
        )
    except DatasetExistsError:
        raise AlreadyExists(
            f"dataset {opts.dataset!r} was created by another writer meanwhile"
        ) from None
    return _outcome(outcome)


def _stage(
    root: str,
    opts: PutOptions,
    lance_schema: LanceSchema,
    target: pa.Schema,
    stream: Iterator[pa.RecordBatch],
    read_version: int,
    version: LanceFileVersion,
) -> dict:
    """Write the stream as uncommitted fragments (in ``opts.job``'s registry, if named) and
    describe them for ``commit_staged``; a failure removes what it wrote."""
    job = staging.StagingJob(root, opts.job) if opts.job else None
    if job is not None:
        check_job_running(job)  # before anything is written
    created_from = storage.outermost_missing(root)
    record = job.new_put(read_version) if job else None
    rows = [0]

    def counted() -> Iterator[pa.RecordBatch]:
        for b in stream:
            rows[0] += b.num_rows
            yield b

    def on_new_file(name: str) -> None:
        assert record is not None and job is not None  # only passed when there is a job
        record.add(name)  # the name first: a crash after this leaves it discoverable
        check_job_running(job)

    fragments: list = []
    try:
        fragments = staging.write_fragments(
            pa.RecordBatchReader.from_batches(target, counted()),
            root,
            lance_schema,
            max_rows_per_file=opts.max_rows_per_file,
            data_storage_version=version,
            on_new_file=on_new_file if record is not None else None,
        )
        if job is not None:
            check_job_running(job)  # the job may have ended while the stream ran
        return {
            "staged": True,
            "rows_written": rows[0],
            "read_version": read_version,
            "fragments": [staging.fragment_to_json(f) for f in fragments],
            "schema": base64.b64encode(target.serialize().to_pybytes()).decode(),
            "data_storage_version": version,
        }
    except BaseException as exc:
        staging.remove_fragment_files(root, fragments)
        if record is not None:
            record.drop()
        job_dirs = (f"{staging.STAGING_DIR}/{job.job}", staging.STAGING_DIR) if job else ()
        service_write.remove_created_dirs(root, created_from, *job_dirs)
        if job is not None and not isinstance(exc, FailedPrecondition):
            check_job_running(job)  # the job's end (which removed our files) is the cause
        raise


def staged_schema(text: str) -> pa.Schema:
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))
    except (ValueError, pa.ArrowException) as exc:
        raise BadRequest(f"'schema' is not a base64 Arrow IPC schema: {exc}") from None
