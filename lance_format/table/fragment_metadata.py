"""pylance's fragment metadata objects: :class:`FragmentMetadata`, :class:`DataFile` and
:class:`DeletionFile`, with their JSON form.

They are the user-facing view of the manifest's ``DataFragment`` message, as pylance's
low-level commit API passes them around (``write_fragments`` returns them,
``LanceOperation.*`` takes them).  They convert to and from the protobuf where they meet
the table layer (:meth:`FragmentMetadata.to_pb` / :meth:`FragmentMetadata.from_pb`); what
they do not model (row-version sequences) rides along unchanged.  ``to_json`` gives the
dictionary pylance 14 gives, so metadata can travel between the two implementations.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgumentError
from ..pb import table_pb2

_FILE_TYPES = {table_pb2.DeletionFile.ARROW_ARRAY: "array", table_pb2.DeletionFile.BITMAP: "bitmap"}
_FILE_TYPE_IDS = {v: k for k, v in _FILE_TYPES.items()}


class _CallablePath(str):
    """A path that can also be called: ``DataFile.path`` was a method in older pylance,
    and pylance 14 still accepts ``path()`` (with a deprecation warning)."""

    def __call__(self) -> str:
        warnings.warn(
            "DataFile.path() is deprecated, use DataFile.path instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return str(self)

    def __reduce__(self):
        return (str, (str(self),))


@dataclass(init=False)
class DataFile:
    """One data file of a fragment: its path under ``data/`` and the field ids it holds."""

    _path: str
    fields: list[int]
    column_indices: list[int] = field(default_factory=list)
    file_major_version: int = 0
    file_minor_version: int = 0
    file_size_bytes: int | None = None
    base_id: int | None = None

    def __init__(
        self,
        path: str,
        fields: list[int],
        column_indices: list[int] | None = None,
        file_major_version: int = 0,
        file_minor_version: int = 0,
        file_size_bytes: int | None = None,
        base_id: int | None = None,
    ):
        self._path = str(path)
        self.fields = fields
        self.column_indices = column_indices or []
        self.file_major_version = file_major_version
        self.file_minor_version = file_minor_version
        self.file_size_bytes = file_size_bytes
        self.base_id = base_id

    @property
    def path(self) -> str:
        return _CallablePath(self._path)

    def __repr__(self) -> str:
        return (
            f"DataFile(path='{self._path}', fields={self.fields}, "
            f"column_indices={self.column_indices}, "
            f"file_major_version={self.file_major_version}, "
            f"file_minor_version={self.file_minor_version}, "
            f"file_size_bytes={self.file_size_bytes})"
        )

    def field_ids(self) -> list[int]:
        return list(self.fields)

    @classmethod
    def from_pb(cls, pb: table_pb2.DataFile) -> DataFile:
        return cls(
            path=pb.path,
            fields=list(pb.fields),
            column_indices=list(pb.column_indices),
            file_major_version=pb.file_major_version,
            file_minor_version=pb.file_minor_version,
            file_size_bytes=pb.file_size_bytes or None,
            base_id=pb.base_id if pb.HasField("base_id") else None,
        )

    def to_pb(self) -> table_pb2.DataFile:
        out = table_pb2.DataFile(
            path=self._path,
            fields=self.fields,
            column_indices=self.column_indices,
            file_major_version=self.file_major_version,
            file_minor_version=self.file_minor_version,
            file_size_bytes=self.file_size_bytes or 0,
        )
        if self.base_id is not None:
            out.base_id = self.base_id
        return out

    def to_json(self) -> dict:
        return {
            "path": self._path,
            "fields": list(self.fields),
            "column_indices": list(self.column_indices),
            "file_major_version": self.file_major_version,
            "file_minor_version": self.file_minor_version,
            "file_size_bytes": self.file_size_bytes,
            "base_id": self.base_id,
        }


@dataclass
class DeletionFile:
    """A fragment's deletion file: named by the version it was written against and an id;
    ``file_type`` is ``"array"`` (Arrow IPC) or ``"bitmap"`` (roaring)."""

    read_version: int
    id: int
    file_type: str
    num_deleted_rows: int
    base_id: int | None = None

    @classmethod
    def from_pb(cls, pb: table_pb2.DeletionFile) -> DeletionFile:
        return cls(
            read_version=pb.read_version,
            id=pb.id,
            file_type=_FILE_TYPES.get(pb.file_type, "array"),
            num_deleted_rows=pb.num_deleted_rows,
            base_id=pb.base_id if pb.HasField("base_id") else None,
        )

    def to_pb(self) -> table_pb2.DeletionFile:
        if self.file_type not in _FILE_TYPE_IDS:
            raise InvalidArgumentError(f"deletion file type must be array or bitmap, not {self}")
        out = table_pb2.DeletionFile(
            file_type=_FILE_TYPE_IDS[self.file_type],
            read_version=self.read_version,
            id=self.id,
            num_deleted_rows=self.num_deleted_rows,
        )
        if self.base_id is not None:
            out.base_id = self.base_id
        return out

    def asdict(self) -> dict:
        return {
            "read_version": self.read_version,
            "id": self.id,
            "file_type": self.file_type,
            "num_deleted_rows": self.num_deleted_rows,
            "base_id": self.base_id,
        }


@dataclass
class FragmentMetadata:
    """A fragment as the manifest records it.  A fragment from ``write_fragments`` or
    ``LanceFragment.create`` has id 0 until a commit numbers it."""

    id: int
    files: list[DataFile]
    physical_rows: int
    deletion_file: DeletionFile | None = None
    row_id_meta: dict | None = None
    """The row-id sequence in pylance's JSON shape (``{"Inline": [bytes...]}``)."""
    _extra: table_pb2.DataFragment | None = field(default=None, repr=False, compare=False)

    @property
    def num_deletions(self) -> int:
        return self.deletion_file.num_deleted_rows if self.deletion_file is not None else 0

    @property
    def num_rows(self) -> int:
        return self.physical_rows - self.num_deletions

    def data_files(self) -> list[DataFile]:
        return self.files

    def __getstate__(self) -> dict:
        # the protobuf class pickles by a module path that only resolves inside this package
        state = dict(self.__dict__)
        if self._extra is not None:
            state["_extra"] = self._extra.SerializeToString()
        return state

    def __setstate__(self, state: dict) -> None:
        extra = state.get("_extra")
        if isinstance(extra, bytes):
            state = {**state, "_extra": table_pb2.DataFragment.FromString(extra)}
        self.__dict__.update(state)

    # -- protobuf -------------------------------------------------------------------------

    @classmethod
    def from_pb(cls, pb: table_pb2.DataFragment) -> FragmentMetadata:
        row_ids = None
        if pb.WhichOneof("row_id_sequence") == "inline_row_ids":
            row_ids = {"Inline": list(pb.inline_row_ids)}
        extra = table_pb2.DataFragment()
        extra.CopyFrom(pb)
        return cls(
            id=pb.id,
            files=[DataFile.from_pb(f) for f in pb.files],
            physical_rows=pb.physical_rows,
            deletion_file=(
                DeletionFile.from_pb(pb.deletion_file) if pb.HasField("deletion_file") else None
            ),
            row_id_meta=row_ids,
            _extra=extra,
        )

    def to_pb(self) -> table_pb2.DataFragment:
        out = table_pb2.DataFragment()
        if self._extra is not None:  # fields not modelled here (row-version sequences)
            out.CopyFrom(self._extra)
            for name in ("files", "deletion_file", "inline_row_ids", "external_row_ids"):
                out.ClearField(name)
        out.id = int(self.id)
        out.physical_rows = int(self.physical_rows)
        out.files.extend(f.to_pb() for f in self.files)
        if self.deletion_file is not None:
            out.deletion_file.CopyFrom(self.deletion_file.to_pb())
        if self.row_id_meta is not None:
            inline = self.row_id_meta.get("Inline") if isinstance(self.row_id_meta, dict) else None
            if inline is None:
                raise InvalidArgumentError("only inline row-id sequences are supported")
            out.inline_row_ids = bytes(inline)
        elif self._extra is not None and self._extra.HasField("external_row_ids"):
            out.external_row_ids.CopyFrom(self._extra.external_row_ids)
        return out

    # -- JSON -----------------------------------------------------------------------------

    def to_json(self) -> dict:
        """pylance's dictionary form (``json.dumps`` it to send it)."""
        return {
            "id": self.id,
            "files": [f.to_json() for f in self.files],
            "overlays": [],
            "physical_rows": self.physical_rows,
            "deletion_file": self.deletion_file.asdict() if self.deletion_file else None,
            "row_id_meta": self.row_id_meta,
            "created_at_version_meta": self._versions_json("inline_created_at_versions"),
            "last_updated_at_version_meta": self._versions_json("inline_last_updated_at_versions"),
        }

    def _versions_json(self, name: str) -> dict | None:
        """A row-version sequence in pylance's JSON shape (``{"inline": [bytes...]}``)."""
        if self._extra is None or not self._extra.HasField(name):
            return None
        return {"inline": list(getattr(self._extra, name))}

    @staticmethod
    def from_json(json_data: str) -> FragmentMetadata:
        """Parse the JSON text of :meth:`to_json`'s dictionary (pylance's too)."""
        try:
            d: Any = json.loads(json_data)
            deletion = d.get("deletion_file")
            extra = table_pb2.DataFragment()
            for key, name in (
                ("created_at_version_meta", "inline_created_at_versions"),
                ("last_updated_at_version_meta", "inline_last_updated_at_versions"),
            ):
                meta = d.get(key)
                if isinstance(meta, dict) and "inline" in meta:
                    setattr(extra, name, bytes(meta["inline"]))
            return FragmentMetadata(
                id=int(d["id"]),
                files=[DataFile(**f) for f in d["files"]],
                physical_rows=int(d["physical_rows"]),
                deletion_file=DeletionFile(**deletion) if deletion is not None else None,
                row_id_meta=d.get("row_id_meta"),
                _extra=extra,
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise InvalidArgumentError(f"not a fragment description: {e}") from None


def as_fragment_pb(fragment: Any) -> table_pb2.DataFragment:
    """A fragment given as :class:`FragmentMetadata`, its protobuf, or JSON text (pylance's
    form or the protobuf's JSON), as the protobuf."""
    if isinstance(fragment, FragmentMetadata):
        return fragment.to_pb()
    if isinstance(fragment, table_pb2.DataFragment):
        return fragment
    if isinstance(fragment, str):
        try:
            parsed = json.loads(fragment)
        except ValueError as e:
            raise InvalidArgumentError(f"not a fragment description: {e}") from None
        if isinstance(parsed, dict) and "physical_rows" in parsed:  # the protobuf's JSON
            return FragmentMetadata.from_json(fragment).to_pb()  # says physicalRows
        from google.protobuf import json_format

        try:
            return json_format.Parse(fragment, table_pb2.DataFragment())
        except (json_format.ParseError, ValueError) as e:
            raise InvalidArgumentError(f"not a fragment description: {e}") from None
    raise InvalidArgumentError(
        f"expected FragmentMetadata or its JSON, got {type(fragment).__name__}"
    )


__all__ = ["DataFile", "DeletionFile", "FragmentMetadata", "as_fragment_pb"]
