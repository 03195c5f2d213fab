"""Writing data into new fragments (not yet committed: a *staged* write).

The stream of batches is encoded as it arrives into data files under ``data/``, rolling to a
new file (and so a new fragment) every ``max_rows_per_file`` rows; only one data file is open
at a time, so memory stays bounded whatever the input size.  The fragments come back with id
0: ids are assigned by the commit (from the manifest's ``max_fragment_id``), which is what
lets staged fragments from many writers be committed together later.  A failure removes every
file this write created.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from ..blob import is_blob_arrow_field
from ..errors import (
    InvalidArgumentError,
    InvalidDataError,
    SchemaMismatchError,
    UnsupportedError,
    first_line,
)
from ..extensions import json_compatible
from ..legacy.writer import DEFAULT_ROWS_PER_GROUP, FOOTER_VERSION, LegacyFileWriter
from ..pb import table_pb2
from ..schema import (
    BLOB_KEY,
    BLOB_V2_EXT_NAME,
    EXT_NAME_KEY,
    LanceSchema,
    blob_v2_file_schema,
    blob_v2_leaf_schema,
)
from ..structural.column import leaf_fields
from ..v2_0.decoder import v20_column_fields
from ..validation import check_arrays, forget_checked
from ..version import DEFAULT_VERSION, LanceFileVersion, writable
from ..writer import DEFAULT_PAGE_BYTES, LanceFileWriter
from . import paths

DEFAULT_MAX_ROWS_PER_FILE = 1024 * 1024
BYTES_CHECK_ROWS = 64 * 1024  # rows written between checks of max_bytes_per_file


def to_reader(data, schema: pa.Schema | None = None) -> pa.RecordBatchReader:
    """Anything pylance writes as one reader: a Table, RecordBatch, RecordBatchReader, a
    Lance dataset or scanner (ours), a pyarrow dataset or scanner, a pandas or polars
    DataFrame, a dict of columns, a list of row dicts, or an iterable of batches."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return data.to_reader()
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    if isinstance(data, pads.Dataset):
        return pads.Scanner.from_dataset(data).to_reader()
    if isinstance(data, pads.Scanner) or _is_lance_scanner(data):
        return data.to_reader()
    if _is_lance_dataset(data):
        return data.scanner().to_reader()
    kind = type(data).__module__.split(".")[0]
    if kind == "pandas" and type(data).__name__ == "DataFrame":
        return pa.Table.from_pandas(data, schema=schema).to_reader()
    if kind == "polars" and type(data).__name__ == "DataFrame":
        return data.to_arrow().to_reader()
    if isinstance(data, dict):
        batch = pa.RecordBatch.from_pydict(data, schema=schema)
        return pa.RecordBatchReader.from_batches(batch.schema, [batch])
    if isinstance(data, list) and data and isinstance(data[0], dict):
        batch = pa.RecordBatch.from_pylist(data, schema=schema)
        return pa.RecordBatchReader.from_batches(batch.schema, [batch])
    if isinstance(data, Iterable):
        it = iter(data)
        first = next(it, None)
        if first is None:
            if schema is None:
                raise InvalidArgumentError("no data and no schema to write")
            return pa.RecordBatchReader.from_batches(schema, [])
        if isinstance(first, pa.Table):
            first = first.combine_chunks().to_batches()

            def batches() -> Iterator[pa.RecordBatch]:
                yield from first
                for t in it:
                    yield from t.to_batches()

            return pa.RecordBatchReader.from_batches(first[0].schema, batches())

        def rest() -> Iterator[pa.RecordBatch]:
            yield first
            yield from it

        return pa.RecordBatchReader.from_batches(first.schema, rest())
    raise InvalidArgumentError(f"cannot write data of type {type(data).__name__}")


def _is_lance_dataset(data) -> bool:
    """A :class:`~lance_format.table.dataset.Dataset` (by shape: the write layer sits
    below the dataset class)."""
    return hasattr(data, "lance_schema") and callable(getattr(data, "scanner", None))


def _is_lance_scanner(data) -> bool:
    return hasattr(data, "lance_schema") and callable(getattr(data, "to_reader", None))


def check_schema(expected: pa.Schema, got: pa.Schema) -> bool:
    """Appends must match the dataset's schema (names and types, in order).  As pylance
    allows, nested fields may differ in nullability alone (a fixed-size list's items are
    always nullable once stored) and ``string_view``/``binary_view`` data fills ``string``/
    ``binary`` columns: then the data must be cast, which this returns."""
    if expected.equals(got):  # the usual append: nothing to check field by field
        return False
    if expected.names != got.names:
        raise SchemaMismatchError(
            f"the data's columns {got.names} differ from the dataset's {expected.names}"
        )
    cast = False
    for a, b in zip(expected, got, strict=True):
        if a.type.equals(b.type) or json_compatible(a.type, b) or _same_extension(a.type, b.type):
            continue  # JSON text of any string type, or JSONB bytes: the writer stores it
        if not comparable_type(a.type).equals(comparable_type(b.type)):
            raise SchemaMismatchError(
                f"column {a.name!r}: the dataset has {a.type}, the data has {b.type}"
            )
        cast = True
    return cast


def _same_extension(a: pa.DataType, b: pa.DataType) -> bool:
    """Two classes of one extension (ours and pylance's ``lance.bfloat16`` when a process
    loads both): same name, storage and parameters store the same bytes."""
    return (
        isinstance(a, pa.BaseExtensionType)
        and isinstance(b, pa.BaseExtensionType)
        and a.extension_name == b.extension_name
        and a.storage_type.equals(b.storage_type)
        and a.__arrow_ext_serialize__() == b.__arrow_ext_serialize__()
    )


def comparable_type(t: pa.DataType) -> pa.DataType:
    """``t`` with every nested field nullable (map keys stay as they must be), view
    types as the plain types Lance stores them as, and dictionaries unordered (Lance keeps
    no ``ordered`` flag; pylance writes an ordered categorical as an unordered one)."""

    def loose(f: pa.Field) -> pa.Field:
        return f.with_type(comparable_type(f.type)).with_nullable(True)

    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_dictionary(t):
        return pa.dictionary(t.index_type, comparable_type(t.value_type), ordered=False)
    if pa.types.is_struct(t):
        return pa.struct([loose(t.field(i)) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(comparable_type(t.key_type)), loose(t.item_field))
    if pa.types.is_large_list(t):
        return pa.large_list(loose(t.value_field))
    if pa.types.is_list(t):
        return pa.list_(loose(t.value_field))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(loose(t.value_field), t.list_size)
    return t


def _cast_to(batches: Iterable[pa.RecordBatch], target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The batches cast to ``target``'s types (see :func:`check_schema`); nulls where the
    dataset's nested field forbids them are refused."""
    for batch in batches:
        check_arrays(batch)  # before the cast reads its offsets
        try:
            arrays = [c.cast(f.type) for c, f in zip(batch.columns, target, strict=True)]
        except pa.ArrowInvalid as e:
            problem = first_line(e)
            raise InvalidDataError(
                f"the data does not fit the dataset's types: {problem}"
            ) from None
        yield pa.RecordBatch.from_arrays(arrays, schema=target)


def write_fragments(
    data,
    root: str,
    schema: LanceSchema,
    *,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    data_storage_version: str | LanceFileVersion = DEFAULT_VERSION,
    max_page_bytes: int | None = None,
    max_bytes_per_file: int | None = None,
    on_new_file: Callable[[str], None] | None = None,
    max_rows_per_group: int | None = None,
) -> list[table_pb2.DataFragment]:
    """Write ``data`` (matching ``schema``, whose field ids are stored) into new data files;
    returns the uncommitted fragments (id 0), in order.

    ``on_new_file(name)`` is called before each data file is created, so a caller can record
    the name where a crash cannot lose it (a staging job's registry); if it raises, that
    file is not created and the write fails as any other.  ``max_bytes_per_file`` starts a
    new file once a file has that many bytes of pages written (buffered data not counted,
    as in pylance: a small file is never split)."""
    if not isinstance(max_rows_per_file, int) or max_rows_per_file <= 0:
        raise InvalidArgumentError("max_rows_per_file must be a positive integer")
    if max_bytes_per_file is not None and (
        not isinstance(max_bytes_per_file, int) or max_bytes_per_file <= 0
    ):
        raise InvalidArgumentError("max_bytes_per_file must be a positive integer")
    version = writable(data_storage_version, legacy=True)
    legacy = version == LanceFileVersion.LEGACY
    major, minor = version.numbers
    forget_checked()  # a new write: only its own batches count as validated
    group = min(max_rows_per_group or DEFAULT_ROWS_PER_GROUP, max_rows_per_file)
    if legacy:  # as pylance: a legacy file ends after the row group that reaches the limit
        max_rows_per_file = -(-max_rows_per_file // group) * group
    blob_v2 = schema.has_blob_v2
    if blob_v2:  # blob columns go to the file writer as marked binary leaves
        if version != LanceFileVersion.V2_2:
            raise UnsupportedError("blob v2 columns need data storage version 2.2")
        table_schema, schema = schema, blob_v2_leaf_schema(schema)
    arrow_schema = schema.to_dataset_arrow()
    reader = to_reader(data, arrow_schema)
    if blob_v2:
        reader = blob_leaves(reader, arrow_schema)
    cast = check_schema(arrow_schema, reader.schema)
    if cast:
        target = pa.schema(
            [
                f if json_compatible(e.type, f) else f.with_type(e.type)
                for f, e in zip(reader.schema, arrow_schema, strict=True)
            ],
            metadata=reader.schema.metadata,
        )
        reader = pa.RecordBatchReader.from_batches(target, _cast_to(reader, target))
    if blob_v2:
        file_fields = blob_v2_file_schema(schema, keep_ids=True).fields
        if [f.id for f in file_fields] != [f.id for f in table_schema.fields]:
            raise UnsupportedError("cannot write blob v2 columns into this schema's field ids")
        leaf_ids = column_field_ids(file_fields, version)
    elif legacy:  # every field id, parents too; the file's own order (no column indices)
        leaf_ids = [f.id for f in schema.walk()]
        major, minor = FOOTER_VERSION
    else:
        leaf_ids = schema.memo(("leaf_ids", version), lambda s: column_field_ids(s.fields, version))
    fragments: list[table_pb2.DataFragment] = []
    written: list[str] = []
    writer: LanceFileWriter | LegacyFileWriter | None = None
    name = ""
    rows = 0

    def finish() -> None:
        nonlocal writer
        assert writer is not None
        result = writer.close()
        writer = None
        fragments.append(
            table_pb2.DataFragment(
                files=[
                    table_pb2.DataFile(
                        path=name,
                        fields=leaf_ids,
                        column_indices=[] if legacy else list(range(len(leaf_ids))),
                        file_major_version=major,
                        file_minor_version=minor,
                        file_size_bytes=result.num_bytes,
                    )
                ],
                physical_rows=result.num_rows,
            )
        )

    try:
        for batch in reader:
            pos = 0
            while pos < batch.num_rows:
                if writer is None:
                    name = paths.new_data_file_name()
                    if on_new_file is not None:
                        on_new_file(name)
                    path = paths.data_file_path(root, name)
                    written.append(path)
                    writer = (
                        LegacyFileWriter(path, schema, max_rows_per_group=group)
                        if legacy
                        else LanceFileWriter(
                            path,
                            batch.schema,
                            version=version,
                            lance_schema=schema,
                            blob_v2=blob_v2,
                            max_page_bytes=max_page_bytes or DEFAULT_PAGE_BYTES,
                            fresh_name=True,
                        )
                    )
                    rows = 0
                take = min(batch.num_rows - pos, max_rows_per_file - rows)
                if max_bytes_per_file is not None:  # look at the size every few rows
                    take = min(take, BYTES_CHECK_ROWS)
                # batches that were cast were validated in full before the cast
                writer._write_batch(batch.slice(pos, take), arrays_checked=cast)
                pos += take
                rows += take
                if rows == max_rows_per_file or (
                    max_bytes_per_file is not None and writer.bytes_written >= max_bytes_per_file
                ):
                    finish()
        if writer is not None and rows:
            finish()
        elif writer is not None:
            writer.abort()
    except BaseException:
        if writer is not None:
            writer.abort()
        for path in written:
            paths.remove(path, missing_ok=True)
        raise
    return fragments


def blob_table_schema(schema: pa.Schema, data_storage_version: str | LanceFileVersion) -> pa.Schema:
    """The table schema of new data: in 2.2, a binary column marked ``lance-encoding:blob``
    becomes the ``lance.blob.v2`` column ``struct<data, uri>`` pylance makes of it (the
    blob extension type is kept as it is)."""
    if writable(data_storage_version, legacy=True) < LanceFileVersion.V2_2:
        return schema
    fields = []
    for f in schema:
        if is_blob_arrow_field(f) and not isinstance(f.type, pa.BaseExtensionType):
            md = {k: v for k, v in (f.metadata or {}).items() if k != BLOB_KEY.encode()}
            md[EXT_NAME_KEY.encode()] = BLOB_V2_EXT_NAME.encode()
            storage = pa.struct([("data", pa.large_binary()), ("uri", pa.utf8())])
            f = pa.field(f.name, storage, f.nullable, metadata=md)
        fields.append(f)
    return pa.schema(fields, metadata=schema.metadata)


def blob_leaves(reader: pa.RecordBatchReader, target: pa.Schema) -> pa.RecordBatchReader:
    """Blob columns as the binary the file writer stores: the bytes of a blob-typed column
    (``data``; external ``uri`` values are not written here), binary as large_binary."""
    blob_columns = [i for i, f in enumerate(target) if is_blob_arrow_field(f)]
    fields = list(reader.schema)
    for i in blob_columns:
        if i < len(fields):
            fields[i] = target.field(i)
    schema = pa.schema(fields, metadata=reader.schema.metadata)

    def convert(batch: pa.RecordBatch) -> pa.RecordBatch:
        arrays = list(batch.columns)
        for i in blob_columns:
            if i >= len(arrays):
                continue
            arr = arrays[i]
            if isinstance(arr.type, pa.BaseExtensionType):
                arr = arr.storage
            if pa.types.is_struct(arr.type):
                names = [arr.type.field(k).name for k in range(arr.type.num_fields)]
                if "uri" in names and arr.field("uri").null_count < len(arr):
                    raise UnsupportedError("external blobs (a uri) are not written here")
                data = arr.field("data")
                if arr.null_count:  # a null blob: the struct's validity, not data's
                    data = pc.if_else(arr.is_valid(), data, pa.nulls(len(arr), data.type))
                arr = data
            arrays[i] = arr.cast(pa.large_binary())
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    return pa.RecordBatchReader.from_batches(schema, (convert(b) for b in reader))


def remove_fragment_files(root: str, fragments) -> None:
    """Delete the data files of fragments that will never be committed (a failed or
    abandoned write), so no orphan is left behind; already-missing files are fine."""
    for frag in fragments:
        for f in frag.files:
            paths.remove(paths.data_file_path(root, f.path), missing_ok=True)


def write_column_file(
    uri: str,
    fragment: table_pb2.DataFragment,
    schema: LanceSchema,
    data_storage_version: str | LanceFileVersion,
    tables: Iterable[pa.Table],
) -> table_pb2.DataFragment:
    """Write one new data file holding ``schema``'s columns for every physical row of
    ``fragment`` (``tables`` yields them in row order) and return ``fragment`` with that file
    added: how new columns (SQL, UDF and value columns) join existing rows.  A failure
    removes the file; the caller removes the files of fragments already returned."""
    version = writable(data_storage_version, "add columns to a dataset of")
    name = paths.new_data_file_name()
    arrow_schema = schema.to_dataset_arrow()
    path = paths.data_file_path(uri, name)
    writer = LanceFileWriter(
        path, arrow_schema, version=version, lance_schema=schema, fresh_name=True
    )
    try:
        for table in tables:
            writer.write_table(table.cast(arrow_schema))
        size = writer.close().num_bytes
    except BaseException:
        writer.abort()
        raise
    return with_data_file(fragment, name, schema.fields, version, size)


def with_data_file(
    fragment: table_pb2.DataFragment,
    name: str,
    fields: list,
    version: LanceFileVersion,
    size: int,
) -> table_pb2.DataFragment:
    """A copy of ``fragment`` with one more data file, ``name``, holding the columns of
    ``fields`` (how new columns join existing rows: add_columns, UDF and value columns)."""
    leaf_ids = column_field_ids(fields, version)
    major, minor = version.numbers
    out = table_pb2.DataFragment()
    out.CopyFrom(fragment)
    out.files.add(
        path=name,
        fields=leaf_ids,
        column_indices=list(range(len(leaf_ids))),
        file_major_version=major,
        file_minor_version=minor,
        file_size_bytes=size,
    )
    return out


def column_field_ids(fields, version: LanceFileVersion) -> list[int]:
    """The field ids a data file's columns hold, in column order (``DataFile.fields``): the
    leaves in 2.1+, every field (parents too) in 2.0."""
    if version == LanceFileVersion.V2_0:
        return [f.id for f in v20_column_fields(fields)]
    return [f.id for f in leaf_fields(fields)]


def fragment_to_json(fragment: table_pb2.DataFragment) -> str:
    """Staged fragment metadata as JSON (for distributed writers to send to a committer)."""
    from google.protobuf import json_format

    return json_format.MessageToJson(fragment, indent=None)


def fragment_from_json(text: str) -> table_pb2.DataFragment:
    from google.protobuf import json_format

    try:
        return json_format.Parse(text, table_pb2.DataFragment())
    except (json_format.ParseError, ValueError) as e:
        raise InvalidArgumentError(f"not a fragment description: {e}") from e


__all__ = [
    "DEFAULT_MAX_ROWS_PER_FILE",
    "check_schema",
    "comparable_type",
    "fragment_from_json",
    "fragment_to_json",
    "to_reader",
    "write_fragments",
]
