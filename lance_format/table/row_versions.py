"""Row version tracking: the dataset version each row was created in and last updated in.

With stable row ids every fragment carries two ``RowDatasetVersionSequence`` messages
(``inline_created_at_versions`` / ``inline_last_updated_at_versions``, or an external byte
range): runs of ``(span, version)`` in physical row order, where only a span's length
counts (spans are ranges of positions; compaction keeps the masked spans of the rows it
kept).  Scans expose them as ``_row_created_at_version`` / ``_row_last_updated_at_version``
(uint64); a fragment without a sequence (no stable row ids, or an older writer) reads as
version 1 throughout, as pylance reads it.

Commits stamp them as pylance 14 does (:func:`stamp_new_fragments` and friends): rows new
to the dataset get the commit's version in both; rows an update moved keep the creation
version of the row they replace and get the commit's version as last update; rewriting a
fragment's columns (add_columns with data, a cast, a merge) restamps the last update of all
its rows; deletes, renames and drops change nothing; compaction carries both over.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .. import storage
from ..errors import CorruptFileError, LanceError
from ..pb import rowids_pb2, table_pb2
from . import rowids

CREATED_AT = "_row_created_at_version"
LAST_UPDATED_AT = "_row_last_updated_at_version"
VERSION_COLUMNS = (CREATED_AT, LAST_UPDATED_AT)
DEFAULT_VERSION = 1  # what a fragment without a sequence reads as

# the DataFragment oneof of each column: (inline field, external field)
_FIELDS = {
    CREATED_AT: ("inline_created_at_versions", "external_created_at_versions"),
    LAST_UPDATED_AT: ("inline_last_updated_at_versions", "external_last_updated_at_versions"),
}
_ONEOF = {
    CREATED_AT: "created_at_version_sequence",
    LAST_UPDATED_AT: "last_updated_at_version_sequence",
}

Runs = list[tuple[np.ndarray, int]]  # (span positions, version) per run


# -- decoding -------------------------------------------------------------------------------


def decode_runs(data: bytes, *, max_len: int = rowids.MAX_SEQUENCE_LEN) -> Runs:
    seq = rowids_pb2.RowDatasetVersionSequence()
    try:
        seq.ParseFromString(bytes(data))
    except Exception as exc:  # protobuf's DecodeError
        raise CorruptFileError(f"row version sequence is not a valid protobuf: {exc}") from None
    out: Runs = []
    budget = max_len
    for i, run in enumerate(seq.runs):
        try:
            span = rowids.decode_segment(run.span, max_len=budget)
        except LanceError as exc:
            raise CorruptFileError(f"row version run {i}: {exc.problem}") from None
        budget -= len(span)
        out.append((span, int(run.version)))
    return out


def decode_versions(data: bytes, *, max_len: int = rowids.MAX_SEQUENCE_LEN) -> np.ndarray:
    """One uint64 version per physical row."""
    runs = decode_runs(data, max_len=max_len)
    if not runs:
        return np.zeros(0, np.uint64)
    return np.repeat(
        np.array([v for _, v in runs], dtype=np.uint64), [len(span) for span, _ in runs]
    )


def _raw(root: str, fragment: table_pb2.DataFragment, column: str) -> bytes | None:
    which = fragment.WhichOneof(_ONEOF[column])
    if which is None:
        return None
    inline, _external = _FIELDS[column]
    if which == inline:
        return bytes(getattr(fragment, inline))
    ext = getattr(fragment, which)
    f = storage.open_file(storage.join(root, ext.path))
    try:
        return f.read_at(ext.offset, ext.size)
    finally:
        f.close()


def fragment_versions(root: str, fragment: table_pb2.DataFragment, column: str) -> np.ndarray:
    """``column``'s value for every physical row of ``fragment`` (1 without a sequence)."""
    n = int(fragment.physical_rows)
    data = _raw(root, fragment, column)
    if data is None:
        return np.full(n, DEFAULT_VERSION, dtype=np.uint64)
    values = decode_versions(data, max_len=max(n, 1))
    if len(values) != n:
        raise CorruptFileError(
            f"fragment {fragment.id}: {column} covers {len(values)} of {n} physical rows"
        )
    return values


# -- encoding -------------------------------------------------------------------------------


def encode_runs(runs: Iterable[tuple[np.ndarray, int]]) -> bytes:
    seq = rowids_pb2.RowDatasetVersionSequence()
    for span, version in runs:
        if len(span):
            seq.runs.add(span=rowids.encode_segment(span), version=int(version))
    return seq.SerializeToString()


def encode_versions(values: np.ndarray) -> bytes:
    """Run-length encode one version per row (spans are position ranges from 0)."""
    values = np.asarray(values, dtype=np.uint64)
    if not len(values):
        return b""
    starts = np.flatnonzero(np.concatenate([[True], values[1:] != values[:-1]]))
    ends = np.append(starts[1:], len(values))
    return encode_runs(
        (np.arange(s, e, dtype=np.uint64), int(values[s]))
        for s, e in zip(starts, ends, strict=True)
    )


def uniform(rows: int, version: int) -> bytes:
    return encode_versions(np.full(rows, version, dtype=np.uint64))


def has_sequences(fragment: table_pb2.DataFragment) -> bool:
    return fragment.WhichOneof(_ONEOF[CREATED_AT]) is not None


# -- stamping at commit ---------------------------------------------------------------------


def stamp_new(fragment: table_pb2.DataFragment, version: int) -> None:
    """A fragment of rows new to the dataset: created and updated now."""
    if fragment.physical_rows:
        data = uniform(fragment.physical_rows, version)
        fragment.inline_created_at_versions = data
        fragment.inline_last_updated_at_versions = data


def restamp_updated(fragment: table_pb2.DataFragment, version: int) -> None:
    """Every row of ``fragment`` rewritten in place (its columns): updated now."""
    if fragment.physical_rows:
        fragment.inline_last_updated_at_versions = uniform(fragment.physical_rows, version)


def stamp_moved(
    root: str,
    fragment: table_pb2.DataFragment,
    sources: Sequence[table_pb2.DataFragment],
    version: int,
) -> None:
    """A fragment of rows an update moved (they carry their row ids): each keeps the
    creation version of the row with its id in ``sources`` (rows without one are new),
    and all were updated now."""
    ids = rowids.fragment_row_ids(root, fragment)
    if ids is None or not len(ids):
        stamp_new(fragment, version)
        return
    created = np.full(len(ids), version, dtype=np.uint64)
    remaining = np.ones(len(ids), dtype=bool)
    for src in sources:
        src_ids = rowids.fragment_row_ids(root, src)
        if src_ids is None or not len(src_ids):
            continue
        order = np.argsort(src_ids, kind="stable")
        keys = src_ids[order]
        pos = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
        hit = remaining & (keys[pos] == ids)
        if hit.any():
            src_created = fragment_versions(root, src, CREATED_AT)
            created[hit] = src_created[order[pos[hit]]]
            remaining &= ~hit
        if not remaining.any():
            break
    fragment.inline_created_at_versions = encode_versions(created)
    fragment.inline_last_updated_at_versions = uniform(len(ids), version)


def rechunk(
    root: str,
    sources: Sequence[tuple[table_pb2.DataFragment, np.ndarray]],
    chunk_sizes: Sequence[int],
    column: str,
) -> list[bytes]:
    """``column``'s sequences for fragments rewritten from ``sources`` (compaction): each
    source's runs with its deleted positions masked out (``live`` = the kept physical
    offsets), concatenated and cut at ``chunk_sizes``, as pylance carries them."""
    runs: Runs = []
    for frag, live in sources:
        data = _raw(root, frag, column)
        if data is None:
            src = [(np.arange(frag.physical_rows, dtype=np.uint64), DEFAULT_VERSION)]
        else:
            src = decode_runs(data, max_len=max(int(frag.physical_rows), 1))
        start = 0
        live = np.asarray(live, dtype=np.int64)
        for span, v in src:
            lo, hi = np.searchsorted(live, [start, start + len(span)])
            kept = span[live[lo:hi] - start]
            if len(kept):
                runs.append((kept, v))
            start += len(span)
    out = []
    i, offset = 0, 0
    for size in chunk_sizes:
        chunk: Runs = []
        need = int(size)
        while need and i < len(runs):
            span, v = runs[i]
            take = min(need, len(span) - offset)
            chunk.append((span[offset : offset + take], v))
            need -= take
            offset += take
            if offset == len(span):
                i, offset = i + 1, 0
        out.append(encode_runs(chunk))
    return out


__all__ = [
    "CREATED_AT",
    "LAST_UPDATED_AT",
    "VERSION_COLUMNS",
    "decode_runs",
    "decode_versions",
    "encode_runs",
    "encode_versions",
    "fragment_versions",
    "has_sequences",
    "rechunk",
    "restamp_updated",
    "stamp_moved",
    "stamp_new",
    "uniform",
]
