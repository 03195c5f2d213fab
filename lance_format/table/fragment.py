"""A fragment: a horizontal slice of a dataset, made of data files that share its rows.

A fragment lists one or more data files; each holds some of the dataset's fields for all of
the fragment's physical rows (a column added later lives in a file of its own, and a field
no file holds reads as nulls).  Deleted rows stay in the data files and are hidden by the
fragment's deletion file.  Everything here works in *physical offsets* (row positions inside
the data files); the scanner and the dataset translate to logical row numbers.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa

from .. import storage
from ..cache import SearchCache
from ..errors import CorruptFileError, InvalidArgumentError, LanceError
from ..extensions import to_dataset_array
from ..pb import table_pb2
from ..reader import LanceFileReader
from ..schema import (
    BLOB_V2_DESCRIPTOR,
    LEGACY_BLOB_DESCRIPTOR,
    LanceField,
    LanceSchema,
    is_blob_v2_column,
    is_legacy_blob,
    parse_logical_type,
)
from ..version import LanceFileVersion
from . import deletion, paths, row_versions, rowids
from .fragment_metadata import DataFile, FragmentMetadata
from .lance_operation import create_fragment

if TYPE_CHECKING:
    from .dataset import Dataset
    from .scanner import Scanner

# what a scan returns for a blob v2 column: each row's descriptor, as pylance's scans do
BLOB_DESCRIPTOR_TYPE = pa.struct(
    [pa.field(name, parse_logical_type(lt), nullable=False) for name, lt in BLOB_V2_DESCRIPTOR]
)


is_blob_v2 = is_blob_v2_column  # a table-level blob v2 column: its files hold descriptors


def scan_field(f: LanceField) -> pa.Field:
    """The Arrow field a scan returns for a top-level field of the dataset."""
    if is_blob_v2(f):
        return pa.field(f.name, BLOB_DESCRIPTOR_TYPE, f.nullable)
    if is_legacy_blob(f):  # 2.0/2.1 blobs: (position, size) in the data file, as pylance
        return pa.field(f.name, LEGACY_BLOB_DESCRIPTOR, f.nullable, f.to_arrow().metadata)
    return f.to_dataset_arrow()


@dataclass
class _ReadPlan:
    """How a fragment reads one projection (see :meth:`Fragment._read_plan`)."""

    fields: tuple  # kept so that no field's id is reused while the plan exists
    by_file: list[tuple[int, list[str], list[int]]]  # data file, names there, field ids
    split: list[LanceField]  # fields whose parts lie in several data files
    schema: pa.Schema
    json: list[bool]  # fields read as JSONB and returned as JSON text


@dataclass(frozen=True)
class _Source:
    """Where one top-level field of the dataset is read from in this fragment."""

    file_index: int
    name: str  # the field's name inside that data file


def _of_dataset(ds: Any, fragment_id: Any, fragment: Any) -> tuple:
    """What a Fragment needs, for fragment ``fragment_id`` (or the one ``fragment``
    describes) of the dataset ``ds``."""
    if fragment is not None:
        fragment_id = getattr(fragment, "fragment_id", getattr(fragment, "id", None))
    if fragment_id is None:
        raise InvalidArgumentError("Either fragment or fragment_id must be specified")
    found = ds.get_fragment(int(fragment_id))
    if found is None:
        raise InvalidArgumentError(f"Fragment id does not exist: {fragment_id}")
    return found.root, found.pb, found.lance_schema, found.cache, ds


class Fragment:
    """One fragment of one dataset version (pylance's ``LanceFragment``)."""

    def __init__(
        self,
        root: Any,
        pb: Any = None,
        schema: LanceSchema | None = None,
        cache: SearchCache | None = None,
        dataset: Dataset | None = None,
        *,
        fragment: Any = None,
    ):
        if not isinstance(root, str):  # pylance's form: LanceFragment(dataset, fragment_id)
            root, pb, schema, cache, dataset = _of_dataset(root, pb, fragment)
        assert isinstance(pb, table_pb2.DataFragment) and schema is not None
        self.root = root
        self.pb = pb
        self.lance_schema = schema
        self.cache = cache
        self._dataset = dataset
        self._read_plans: dict[tuple, _ReadPlan] = {}

    def __reduce__(self):
        # pickled as its dataset (which pickles as what reopens it) and its id
        return _fragment_of, (self.dataset, self.fragment_id)

    @staticmethod
    def create(dataset_uri, data, fragment_id: int | None = None, schema=None, **options):
        """Write ``data`` as ONE new fragment of the dataset at ``dataset_uri`` (or of the
        dataset it will become) without committing it; its metadata (id ``fragment_id`` or
        0), for ``LanceOperation.Append``/``Overwrite``."""
        return create_fragment(dataset_uri, data, fragment_id, schema, **options)

    # -- pylance's LanceFragment ----------------------------------------------------------

    @property
    def dataset(self) -> Dataset:
        if self._dataset is None:
            raise InvalidArgumentError("this fragment was not opened through a dataset")
        return self._dataset

    @property
    def schema(self) -> pa.Schema:
        return self.lance_schema.to_dataset_arrow()

    @property
    def metadata(self) -> FragmentMetadata:
        return FragmentMetadata.from_pb(self.pb)

    def deletion_file(self) -> str | None:
        """The deletion file's path relative to the dataset root (None when none)."""
        if not self.pb.HasField("deletion_file"):
            return None
        d = self.pb.deletion_file
        name = paths.deletion_file_name(self.fragment_id, d.read_version, d.id, d.file_type)
        return f"{paths.DELETIONS_DIR}/{name}"

    def scanner(self, **options):
        """A scan of this fragment alone (the dataset scanner's options)."""
        return self.dataset.scanner(fragments=[self], **options)

    def to_table(self, columns=None, filter=None, **options) -> pa.Table:
        return self.scanner(columns=columns, filter=filter, **options).to_table()

    def to_batches(self, columns=None, filter=None, **options):
        return self.scanner(columns=columns, filter=filter, **options).to_batches()

    def merge(self, data_obj, left_on: str, right_on: str | None = None, schema=None):
        """pylance's ``LanceFragment.merge``: the columns of ``data_obj`` (but its key) as a
        new data file of this fragment, row ``left_on == right_on``, null where no row
        matches; the uncommitted FragmentMetadata and the dataset schema with the new
        columns, for ``LanceOperation.Merge``."""
        from .dataset import merge_fragment_columns  # the dataset layer depends on this one

        return merge_fragment_columns(self, data_obj, left_on, right_on or left_on, schema)

    def merge_columns(
        self, value_func, columns=None, batch_size=None, reader_schema=None
    ) -> tuple[FragmentMetadata, LanceSchema]:
        """pylance's ``LanceFragment.merge_columns``: ``add_columns`` for this fragment
        alone, uncommitted; the new fragment metadata and the schema with the new columns
        (for ``LanceOperation.Merge`` or ``Overwrite``)."""
        from .dataset import new_column_files  # the dataset layer depends on this one

        if getattr(value_func, "cache", None) is not None:
            raise InvalidArgumentError(
                "A checkpoint file cannot be used when applying a UDF to one fragment: "
                "nothing would remove it"
            )
        ds = self.dataset
        (pb,), added = new_column_files(ds, [self], value_func, columns, reader_schema, batch_size)
        schema = LanceSchema(
            list(ds.lance_schema.fields) + list(added.fields), dict(ds.lance_schema.metadata)
        )
        return FragmentMetadata.from_pb(pb), schema

    def update_columns(
        self,
        data_obj,
        left_on: str = "_rowid",
        right_on: str | None = None,
        schema=None,
        *,
        with_offsets: bool = False,
    ):
        """pylance's ``LanceFragment.update_columns``: ``data_obj``'s values for existing
        columns, on the rows whose ``left_on`` matches its ``right_on``, as a new data file
        (uncommitted); the fragment metadata and the modified field ids (and, with
        ``with_offsets``, the matched offsets as a roaring bitmap), for
        ``LanceOperation.Update``."""
        from .dataset import update_fragment_columns  # the dataset layer depends on this one

        meta, modified, offsets = update_fragment_columns(self, data_obj, left_on, right_on, schema)
        return (meta, modified, offsets) if with_offsets else (meta, modified)

    @staticmethod
    def create_from_file(filename: str, dataset: Dataset, fragment_id: int) -> FragmentMetadata:
        """pylance's ``LanceFragment.create_from_file``: the metadata of a fragment made of
        one existing data file of ``dataset`` (under ``data/``), e.g. to re-attach a file
        a manifest lost."""
        from .dataset import fragment_from_file  # the dataset layer depends on this one

        return fragment_from_file(filename, dataset, fragment_id)

    def head(self, num_rows: int) -> pa.Table:
        return self.to_table(limit=num_rows)

    def take(self, indices, columns: list[str] | None = None) -> pa.Table:
        """Rows by position among this fragment's live rows, in the order asked."""
        positions = np.asarray(indices, dtype=np.int64).reshape(-1)
        live = self.live_offsets
        if len(positions) and (positions.min() < 0 or positions.max() >= len(live)):
            raise InvalidArgumentError(
                f"take indices must be in 0..{len(live) - 1} for fragment {self.fragment_id}"
            )
        fields = cast("Scanner", self.dataset.scanner(columns=columns)).fields
        offsets = live[positions]
        uniq, inverse = np.unique(offsets, return_inverse=True)
        return self.read(fields, uniq).take(pa.array(inverse.reshape(-1)))

    def delete(self, predicate) -> FragmentMetadata | None:
        """Hide the rows matching ``predicate`` with a new deletion file (uncommitted: pass
        the result to ``LanceOperation.Delete``); None when no row would be left."""
        scan = self.scanner(columns=[], filter=predicate, with_row_address=True).to_table()
        hit = (scan.column("_rowaddr").to_numpy() & np.uint64(0xFFFFFFFF)).astype(np.int64)
        all_deleted = np.union1d(self.deleted_offsets, hit)
        if len(all_deleted) == self.physical_rows:
            return None
        if not len(hit):
            return self.metadata
        new = table_pb2.DataFragment()
        new.CopyFrom(self.pb)
        new.deletion_file.CopyFrom(
            deletion.write_deletion_file(
                self.root, self.fragment_id, self.dataset.version, all_deleted
            )
        )
        return FragmentMetadata.from_pb(new)

    # -- metadata -------------------------------------------------------------------------

    @property
    def fragment_id(self) -> int:
        return int(self.pb.id)

    @property
    def physical_rows(self) -> int:
        return int(self.pb.physical_rows)

    @property
    def num_deletions(self) -> int:
        if not self.pb.HasField("deletion_file"):
            return 0
        return int(self.pb.deletion_file.num_deleted_rows)

    def count_rows(self, filter=None) -> int:
        """Live rows (matching ``filter``, an SQL string or Arrow expression, if given)."""
        if filter is not None:
            return self.scanner(columns=[], filter=filter).count_rows()
        if self.pb.HasField("deletion_file") and not self.pb.deletion_file.num_deleted_rows:
            return self.physical_rows - len(self.deleted_offsets)
        return self.physical_rows - self.num_deletions

    def data_files(self) -> list[DataFile]:
        return [DataFile.from_pb(f) for f in self.pb.files]

    # -- deletions and row ids ------------------------------------------------------------

    @functools.cached_property
    def deleted_offsets(self) -> np.ndarray:
        """Sorted physical offsets hidden by the deletion file (empty when none)."""
        if not self.pb.HasField("deletion_file"):
            return np.zeros(0, dtype=np.int64)
        offsets = deletion.read_deletion_file(self.root, self.fragment_id, self.pb.deletion_file)
        offsets = np.unique(np.asarray(offsets, dtype=np.int64))
        if len(offsets) and (offsets[0] < 0 or offsets[-1] >= self.physical_rows):
            raise CorruptFileError(
                f"fragment {self.fragment_id}: deletion file names rows outside its "
                f"{self.physical_rows} physical rows"
            )
        return offsets

    def live_mask(self, start: int, stop: int) -> np.ndarray | None:
        """Which physical rows in [start, stop) are not deleted (None = all of them)."""
        deleted = self.deleted_offsets
        if not len(deleted):
            return None
        lo, hi = np.searchsorted(deleted, [start, stop])
        if lo == hi:
            return None
        mask = np.ones(stop - start, dtype=bool)
        mask[deleted[lo:hi] - start] = False
        return mask

    @functools.cached_property
    def live_offsets(self) -> np.ndarray:
        """Physical offsets of the rows that are not deleted, ascending."""
        all_rows = np.arange(self.physical_rows, dtype=np.int64)
        if not len(self.deleted_offsets):
            return all_rows
        return np.setdiff1d(all_rows, self.deleted_offsets, assume_unique=True)

    @functools.cached_property
    def row_ids(self) -> np.ndarray | None:
        """Stable row ids by physical offset (None when the dataset has no stable row ids)."""
        ids = rowids.fragment_row_ids(self.root, self.pb)
        if ids is None:
            return None
        ids = np.asarray(ids, dtype=np.uint64)
        if len(ids) != self.physical_rows:
            raise CorruptFileError(
                f"fragment {self.fragment_id}: {len(ids)} row ids for "
                f"{self.physical_rows} physical rows"
            )
        return ids

    def row_versions(self, column: str) -> np.ndarray:
        """``_row_created_at_version`` or ``_row_last_updated_at_version`` by physical
        offset (decoded once per fragment object)."""
        cache = self.__dict__.setdefault("_row_versions", {})
        if column not in cache:
            cache[column] = row_versions.fragment_versions(self.root, self.pb, column)
        return cache[column]

    def row_addresses(self, offsets: np.ndarray) -> np.ndarray:
        return (np.uint64(self.fragment_id) << np.uint64(32)) | np.asarray(offsets, np.uint64)

    # -- data files -----------------------------------------------------------------------

    @functools.cached_property
    def _readers(self) -> list[LanceFileReader]:
        out = []
        for f in self.pb.files:
            path = paths.data_file_path(self.root, f.path)
            field_columns = None
            if len(f.column_indices) and len(f.fields) == len(f.column_indices):
                field_columns = {
                    int(fid): int(col)
                    for fid, col in zip(f.fields, f.column_indices, strict=True)
                    if col >= 0
                }
            try:
                # the manifest knows the size: no HEAD request on object stores
                source = storage.open_file(path, size=f.file_size_bytes or None)
                out.append(
                    LanceFileReader(
                        source,
                        cache=self.cache,
                        field_columns=field_columns,
                        blob_descriptors=True,
                    )
                )
            except LanceError as e:
                if not storage.exists(path):  # the manifest names a file that is gone
                    raise CorruptFileError(
                        f"fragment {self.fragment_id}: data file {f.path!r} is missing",
                        path=path,
                    ) from None
                raise e.with_context(path=path) from None
        return out

    def data_file_of(self, field: LanceField) -> str | None:
        """The path of the data file holding top-level ``field`` (None: no file has it)."""
        src = self._sources.get(field.id)
        if src is None:
            return None
        return paths.data_file_path(self.root, self.pb.files[src.file_index].path)

    def readers(self) -> list[LanceFileReader]:
        """The fragment's data-file readers (opened once; e.g. to warm the search cache)."""
        return list(self._readers)

    @functools.cached_property
    def _sources(self) -> dict[int, _Source]:
        """Top-level field id -> the data file holding it (the last one wins)."""
        out: dict[int, _Source] = {}
        for i, reader in enumerate(self._readers):
            for f in reader.lance_schema.fields:
                out[f.id] = _Source(i, f.name)
        return out

    def may_match(self, terms: list[tuple[str, str, object]]) -> np.ndarray | None:
        """Physical row ranges (``(k, 2)``) that page statistics say may hold rows matching
        every term (``(column, op, literal)``, see :func:`.filters.conjunct_terms`); None
        when no data file keeps statistics (only legacy files do).  Terms whose literal does
        not fit the column's type are ignored: pruning must never drop a matching row."""
        from ..legacy import rows_that_may_match

        by_name = {f.name: f for f in self.lance_schema.fields}
        result: np.ndarray | None = None
        for i, reader in enumerate(self._readers):
            if reader.version != LanceFileVersion.LEGACY:
                continue
            mine = []
            for col, op, value in terms:
                f = by_name.get(col)
                src = self._sources.get(f.id) if f is not None else None
                if f is None or src is None or src.file_index != i:
                    continue
                if not _fits(f.arrow_type, op, value):
                    continue
                mine.append((src.name, op, value))
            if not mine:
                continue
            try:
                ranges = rows_that_may_match(reader, mine)
            except (LanceError, TypeError, ValueError, pa.ArrowException):
                continue  # statistics that cannot judge the term: no pruning
            result = ranges if result is None else _intersect(result, ranges)
        return result

    def page_boundaries(self, fields: list[LanceField] | None = None) -> np.ndarray:
        """Physical rows where pages start (plus the total), for cutting the fragment into
        page-aligned ranges: those of the data file whose heaviest column has the finest
        pages among the files holding the projected fields."""
        fields = list(self.lance_schema.fields) if fields is None else fields
        best = np.array([0, self.physical_rows], dtype=np.int64)
        for i, names in self._names_by_file(fields).items():
            starts = self._readers[i].page_boundaries(names)
            if len(starts) > len(best) and starts[-1] == self.physical_rows:
                best = starts
        return best

    def stored_bytes_per_row(self, fields: list[LanceField]) -> float | None:
        """Stored bytes per physical row of ``fields`` (None when a file cannot tell)."""
        total = 0
        for i, names in self._names_by_file(fields).items():
            size = self._readers[i].stored_bytes(names)
            if size is None:
                return None
            total += size
        return total / max(1, self.physical_rows)

    @functools.cached_property
    def _split(self) -> dict[int, list[tuple[int, LanceField]]]:
        """Top-level struct field id -> every (data file, its field) holding part of it,
        in file order, when more than one does (a cast of a field inside a struct writes
        the new child to a file of its own; the others stay where they were)."""
        holders: dict[int, list[tuple[int, LanceField]]] = {}
        for i, reader in enumerate(self._readers):
            listed = self.pb.files[i].fields
            live = {fid for fid in listed if fid >= 0}
            for f in reader.lance_schema.fields:
                # a file whose fields of the struct are all tombstones (-2: the struct was
                # rewritten into a later file) holds none of it
                if f.logical_type == "struct" and (
                    not listed or any(x.id in live for x in f.walk())
                ):
                    holders.setdefault(f.id, []).append((i, f))
        return {fid: parts for fid, parts in holders.items() if len(parts) > 1}

    def _read_split(self, field: LanceField, rows, n: int) -> pa.Array:
        """A struct whose children live in several data files, put together by field id
        (a child found in several files is read from the last)."""
        parts = []
        for file_index, file_field in self._split[field.id]:
            reader = self._readers[file_index]
            if isinstance(rows, tuple):
                table = reader.read_range(rows[0], rows[1], [file_field.name])
            else:
                table = reader.take(rows, [file_field.name])
            col = table.column(file_field.name)
            parts.append(
                (file_field, col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
            )
        return _assemble(field, parts, n)

    def pages_cached(self, fields: list[LanceField], row: int, stop: int | None = None) -> bool:
        """Whether the decoded pages of physical ``row`` of ``fields`` are all cached (with
        ``stop``: of every row in [row, stop))."""
        by_file = self._names_by_file(fields)
        return bool(by_file) and all(
            self._readers[i].pages_cached(names, row, stop) for i, names in by_file.items()
        )

    def _names_by_file(self, fields: list[LanceField]) -> dict[int, list[str]]:
        """Data file index -> the names ``fields`` have in that file (absent fields skipped)."""
        out: dict[int, list[str]] = {}
        for f in fields:
            src = self._sources.get(f.id)
            if src is not None:
                out.setdefault(src.file_index, []).append(src.name)
        return out

    def read(
        self, fields: list[LanceField], rows: np.ndarray | tuple[int, int] | None = None
    ) -> pa.Table:
        """The given top-level fields for physical ``rows`` (an ascending offset array, a
        ``(start, stop)`` range, or None for all), in the dataset's names and types."""
        if rows is None:
            rows = (0, self.physical_rows)
        n = rows[1] - rows[0] if isinstance(rows, tuple) else len(rows)
        plan = self._read_plan(fields)
        columns: dict[int, pa.Array | pa.ChunkedArray] = {}
        if n:
            for f in plan.split:
                columns[f.id] = self._read_split(f, rows, n)
        for file_index, names, ids in plan.by_file:
            reader = self._readers[file_index]
            if not n:
                continue
            if isinstance(rows, tuple):
                table = reader.read_range(rows[0], rows[1], names)
            else:
                table = reader.take(rows, names)
            for i, fid in enumerate(ids):
                columns[fid] = table.column(i)
        arrays = []
        for f, af, json in zip(fields, plan.schema, plan.json, strict=True):
            col = columns.get(f.id)
            if col is None:
                col = pa.nulls(n, af.type)
            else:
                if json:
                    col = to_dataset_array(col, f)
                if not col.type.equals(af.type):
                    col = col.cast(af.type)
            arrays.append(col)
        return pa.Table.from_arrays(arrays, schema=plan.schema)

    def _read_plan(self, fields: list[LanceField]) -> _ReadPlan:
        """Where each of ``fields`` comes from and the Arrow schema a read returns, made
        once per projection (by the fields' identities; a dataset makes a projection's
        fields once): a point lookup cannot afford to work them out per read."""
        key = tuple(map(id, fields))
        plans = self._read_plans
        plan = plans.get(key)
        if plan is not None:
            return plan
        by_file: dict[int, tuple[list[str], list[int]]] = {}
        split = []
        for f in fields:
            src = self._sources.get(f.id)
            if f.id in self._split:
                split.append(f)
            elif src is not None:
                names, ids = by_file.setdefault(src.file_index, ([], []))
                names.append(src.name)
                ids.append(f.id)
        plan = _ReadPlan(
            tuple(fields),
            [(i, names, ids) for i, (names, ids) in by_file.items()],
            split,
            pa.schema([scan_field(f) for f in fields]),
            [f.has_json() for f in fields],
        )
        if len(plans) >= 64:
            plans.clear()
        plans[key] = plan
        return plan


def _fragment_of(ds: Dataset, fragment_id: int) -> Fragment:
    frag = ds.get_fragment(fragment_id)
    if frag is None:
        raise InvalidArgumentError(f"the dataset has no fragment {fragment_id}")
    return frag


def _assemble(field: LanceField, parts: list[tuple[LanceField, pa.Array]], n: int) -> pa.Array:
    """``field``'s values from the ``parts`` (a file's field with the same id, and its
    values) that hold pieces of it: a struct takes each child from the parts holding it
    and its validity from the first part; anything else comes whole from the last part."""
    if not parts:
        return pa.nulls(n, field.to_arrow().type)
    if field.logical_type != "struct":
        return parts[-1][1]
    kids = []
    for child in field.children:
        sub = [
            (fc, arr.field(i))
            for ff, arr in parts
            for i, fc in enumerate(ff.children)
            if fc.id == child.id
        ]
        kids.append(_assemble(child, sub, n))
    first = parts[0][1]
    mask = first.is_null() if first.null_count else None
    names = [c.name for c in field.children]
    return pa.StructArray.from_arrays(kids, names=names, mask=mask)


def _fits(t: pa.DataType, op: str, value: object) -> bool:
    """Whether a filter literal compares with a column of type ``t`` as statistics do."""
    if op in ("is_null", "is_not_null"):
        return True
    values = value if op == "in" and isinstance(value, Iterable) else [value]
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return all(isinstance(v, str) for v in values)
    return False


def _intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection of two sorted lists of disjoint ``[start, stop)`` ranges."""
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return np.array(out, dtype=np.int64).reshape(-1, 2)
