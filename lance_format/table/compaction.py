"""Compaction: rewrite small or heavily deleted fragments into fewer, fuller ones.

Planning follows pylance 14 so a dataset compacts the same way whichever library runs it:
a fragment is a candidate when its deleted share exceeds ``materialize_deletions_threshold``
("compact itself") or it has fewer than ``target_rows_per_fragment`` physical rows
("compact with neighbours"); runs of adjacent candidates form bins; a bin holding a single
fragment that only wants neighbours is left alone; bins are cut into pieces of at least
``target_rows_per_fragment`` live rows.

Committing also follows pylance: a ``ReserveFragments`` transaction first claims the ids of
the new fragments, then one ``Rewrite`` transaction (read version = the version planned on)
swaps each bin's old fragments for its new ones.  A concurrent delete of a rewritten fragment
therefore conflicts, whichever commits first.  With stable row ids the rows keep their ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from ..errors import InvalidArgumentError, InvalidDataError
from ..version import LanceFileVersion, writable
from . import commit, row_versions, rowids, write
from .fragment import Fragment
from .operations import ReserveFragments, Rewrite, RewriteGroup
from .transaction import new_transaction

DEFAULT_TARGET_ROWS = 1024 * 1024
DEFAULT_DELETIONS_THRESHOLD = 0.1
SCAN_BATCH = 64 * 1024


@dataclass
class CompactionMetrics:
    """What a compaction did (pylance reports the same four numbers)."""

    fragments_removed: int = 0
    fragments_added: int = 0
    files_removed: int = 0
    files_added: int = 0


@dataclass
class _Bin:
    fragments: list[Fragment]
    itself: list[bool]  # per fragment: a candidate for its deletions (not only its size)
    rows: list[int]  # live rows per fragment


def plan_compaction(
    fragments: list[Fragment],
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
    materialize_deletions: bool = True,
    materialize_deletions_threshold: float = DEFAULT_DELETIONS_THRESHOLD,
) -> list[list[Fragment]]:
    """Groups of adjacent fragments to rewrite together (each group -> new fragments)."""
    bins: list[_Bin] = []
    current: _Bin | None = None
    for frag in fragments:
        live = frag.count_rows()
        deleted_share = 1 - live / frag.physical_rows if frag.physical_rows else 0.0
        if materialize_deletions and deleted_share > materialize_deletions_threshold:
            itself: bool | None = True
        elif frag.physical_rows < target_rows_per_fragment:
            itself = False
        else:
            itself = None
        if itself is None:
            if current is not None:
                bins.append(current)
                current = None
            continue
        if current is None:
            current = _Bin([], [], [])
        current.fragments.append(frag)
        current.itself.append(itself)
        current.rows.append(live)
    if current is not None:
        bins.append(current)
    groups = []
    for b in bins:
        if len(b.fragments) == 1 and not b.itself[0]:
            continue  # nothing to merge it with
        groups.extend(_split_for_size(b, target_rows_per_fragment))
    return groups


def _split_for_size(b: _Bin, min_rows: int) -> list[list[Fragment]]:
    """Cut a bin into pieces of at least ``min_rows`` live rows; a remainder too small to
    stand alone joins the last piece."""
    out = []
    start = 0
    n = len(b.fragments)
    while True:
        end, rows = start, 0
        while rows < min_rows and end < n:
            rows += b.rows[end]
            end += 1
        if sum(b.rows[end:]) >= min_rows:
            out.append(b.fragments[start:end])
            start = end
        else:
            out.append(b.fragments[start:])
            return out


def compact_files(
    ds,
    *,
    target_rows_per_fragment: int | None = None,
    materialize_deletions: bool | None = None,
    materialize_deletions_threshold: float | None = None,
    max_bytes_per_file: int | None = None,
    batch_size: int | None = None,
    excluded_fragment_ids: list[int] | None = None,
    data_storage_version: str | None = None,
    compaction_mode: str | None = None,
    max_source_fragments: int | None = None,
    max_source_rows: int | None = None,
    max_source_bytes: int | None = None,
    **options,
) -> tuple[CompactionMetrics, int | None]:
    """Rewrite ``ds``'s small or heavily deleted fragments; commits two versions
    (reservation, rewrite) when there is anything to do, none otherwise.  Returns the
    metrics and the version the rewrite made (None when nothing was done).

    pylance's parameters: None means the dataset's ``lance.compaction.<name>`` config
    value, else the default; ``excluded_fragment_ids`` are never rewritten and split the
    runs; ``max_source_fragments`` / ``_rows`` (live) / ``_bytes`` (data files) take the
    planned rewrites in order until the next would pass the limit;
    ``data_storage_version`` writes the new files in another 2.x version (the dataset's
    default stays); ``max_bytes_per_file`` and ``batch_size`` (rows read per step) shape
    the rewrite; its tuning hints (``num_threads``, ``max_rows_per_group`` (legacy files
    only), ``defer_index_remap``, ``binary_copy_read_batch_bytes``) change nothing here.
    The binary-copy modes re-encode (the rows written are the same);
    ``"force_binary_copy"`` fails where pylance's would (inputs of another file version
    than the output)."""
    config = _config_defaults(ds)
    target_rows_per_fragment = _pick(
        target_rows_per_fragment, config, "target_rows_per_fragment", DEFAULT_TARGET_ROWS
    )
    materialize_deletions = _pick(materialize_deletions, config, "materialize_deletions", True)
    materialize_deletions_threshold = _pick(
        materialize_deletions_threshold,
        config,
        "materialize_deletions_threshold",
        DEFAULT_DELETIONS_THRESHOLD,
    )
    max_bytes_per_file = _pick(max_bytes_per_file, config, "max_bytes_per_file", None)
    batch_size = _pick(batch_size, config, "batch_size", None)
    compaction_mode = _pick(compaction_mode, config, "compaction_mode", None)
    data_storage_version = _pick(data_storage_version, config, "data_storage_version", None)
    limits = {
        "max_source_fragments": _pick(max_source_fragments, config, "max_source_fragments", None),
        "max_source_rows": _pick(max_source_rows, config, "max_source_rows", None),
        "max_source_bytes": _pick(max_source_bytes, config, "max_source_bytes", None),
    }
    _check_options(options, compaction_mode, limits)
    if not isinstance(target_rows_per_fragment, int) or target_rows_per_fragment <= 0:
        raise InvalidArgumentError("target_rows_per_fragment must be a positive integer")
    if not 0 <= materialize_deletions_threshold <= 1:
        raise InvalidArgumentError("materialize_deletions_threshold must be within [0, 1]")
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size <= 0):
        raise InvalidArgumentError("batch_size must be a positive integer")
    version = _output_version(ds, data_storage_version)
    excluded = set(excluded_fragment_ids or ())
    groups = []
    run: list[Fragment] = []
    for frag in [*ds.get_fragments(), None]:  # excluded fragments split the runs
        if frag is not None and frag.fragment_id not in excluded:
            run.append(frag)
            continue
        groups += plan_compaction(
            run, target_rows_per_fragment, materialize_deletions, materialize_deletions_threshold
        )
        run = []
    groups = _within_limits(groups, **limits)
    if compaction_mode == "force_binary_copy":
        _check_binary_copy(groups, version)
    metrics = CompactionMetrics()
    if not groups:
        return metrics, None
    rewritten = []
    try:
        for group in groups:
            new = write.write_fragments(
                _live_rows(ds, group, batch_size or SCAN_BATCH),
                ds.uri,
                ds.lance_schema,
                max_rows_per_file=_rows_per_file(group, target_rows_per_fragment),
                data_storage_version=version,
                max_bytes_per_file=max_bytes_per_file,
            )
            if ds.stable_row_ids:
                sources = []
                for f in group:
                    assert f.row_ids is not None  # the dataset has stable row ids
                    sources.append(f.row_ids[f.live_offsets])
                sequences = rowids.rechunk_row_ids(sources, [f.physical_rows for f in new])
                for f, seq in zip(new, sequences, strict=True):
                    f.inline_row_ids = seq
                if any(row_versions.has_sequences(f.pb) for f in group):
                    _carry_versions(ds.uri, group, new)
            rewritten.append((group, new))
        total_new = sum(len(new) for _, new in rewritten)
        reserve = ReserveFragments(num_fragments=total_new)
        reserved = commit.commit(ds.uri, new_transaction(ds.version, reserve))
    except BaseException:
        write.remove_fragment_files(ds.uri, [f for _, new in rewritten for f in new])
        raise
    next_id = reserved.pb.max_fragment_id - total_new + 1
    op = Rewrite()
    for group, new in rewritten:
        for f in new:
            f.id = next_id
            next_id += 1
        op.groups.append(RewriteGroup([f.pb for f in group], list(new)))
        metrics.fragments_removed += len(group)
        metrics.files_removed += sum(
            len(f.pb.files) + f.pb.HasField("deletion_file") for f in group
        )
        metrics.fragments_added += len(new)
        metrics.files_added += sum(len(f.files) for f in new)
    try:
        done = commit.commit(ds.uri, new_transaction(ds.version, op))
    except BaseException:
        write.remove_fragment_files(ds.uri, [f for _, new in rewritten for f in new])
        raise
    return metrics, int(done.version)


CONFIG_PREFIX = "lance.compaction."


def _flag(value: str) -> bool:
    return value.strip().lower() == "true"


_CONFIG_TYPES: dict[str, Callable[[str], object]] = {
    "target_rows_per_fragment": int,
    "max_rows_per_group": int,
    "max_bytes_per_file": int,
    "materialize_deletions": _flag,
    "materialize_deletions_threshold": float,
    "defer_index_remap": _flag,
    "batch_size": int,
    "compaction_mode": str,
    "binary_copy_read_batch_bytes": int,
    "max_source_fragments": int,
    "max_source_rows": int,
    "max_source_bytes": int,
    "data_storage_version": str,
}


def _config_defaults(ds) -> dict:
    """The ``lance.compaction.*`` config entries, parsed (pylance's defaults stored in the
    dataset: an explicit argument wins over them, they win over the built-in defaults)."""
    out = {}
    for key, value in ds.config().items():
        name = key[len(CONFIG_PREFIX) :] if key.startswith(CONFIG_PREFIX) else None
        if name in _CONFIG_TYPES:
            try:
                out[name] = _CONFIG_TYPES[name](value)
            except ValueError:
                raise InvalidArgumentError(f"config {key}={value!r} is not valid") from None
    return out


def _pick(value, config: dict, name: str, default):
    if value is not None:
        return value
    return config.get(name, default)


def _within_limits(
    groups: list[list[Fragment]],
    max_source_fragments: int | None,
    max_source_rows: int | None,
    max_source_bytes: int | None,
) -> list[list[Fragment]]:
    """The planned rewrites, in order, until taking the next would pass a limit."""
    out: list[list[Fragment]] = []
    frags = rows = size = 0
    for group in groups:
        frags += len(group)
        rows += sum(f.count_rows() for f in group)
        size += sum(d.file_size_bytes for f in group for d in f.pb.files)
        if (
            (max_source_fragments is not None and frags > max_source_fragments)
            or (max_source_rows is not None and rows > max_source_rows)
            or (max_source_bytes is not None and size > max_source_bytes)
        ):
            break
        out.append(group)
    return out


def _output_version(ds, requested: str | None) -> LanceFileVersion:
    """The file version of the new data files: the dataset's, or the one asked for within
    the same family (pylance refuses to mix legacy 0.1 files with 2.x ones)."""
    current = ds.data_storage_version
    if requested is None:
        return writable(current, "compact a dataset of", legacy=True)
    asked = LanceFileVersion.parse(requested)
    if (asked == LanceFileVersion.LEGACY) != (current == LanceFileVersion.LEGACY):
        raise InvalidDataError(
            f"Cannot write data files in version {asked} to a dataset with default version "
            f"{current}: V1 and V2 storage versions cannot be mixed"
        )
    return writable(asked, "compact into")


def _check_binary_copy(groups: list[list[Fragment]], version: LanceFileVersion) -> None:
    for group in groups:
        for frag in group:
            for d in frag.pb.files:
                if (d.file_major_version, d.file_minor_version) != version.numbers:
                    raise InvalidArgumentError(
                        f"binary copy needs every input file in version {version}; fragment "
                        f"{frag.fragment_id} has a {d.file_major_version}."
                        f"{d.file_minor_version} file"
                    )


def _carry_versions(root: str, group: list[Fragment], new: list) -> None:
    """The rows keep their creation and last-update versions (the runs of the sources,
    deleted rows masked out, cut at the new fragments' sizes)."""
    sources = [(f.pb, f.live_offsets) for f in group]
    sizes = [f.physical_rows for f in new]
    created = row_versions.rechunk(root, sources, sizes, row_versions.CREATED_AT)
    updated = row_versions.rechunk(root, sources, sizes, row_versions.LAST_UPDATED_AT)
    for f, c, u in zip(new, created, updated, strict=True):
        f.inline_created_at_versions = c
        f.inline_last_updated_at_versions = u


def _rows_per_file(group: list[Fragment], target: int) -> int:
    """Rows per new fragment: the group's rows spread evenly over ``rows // target`` files
    (at least one), so no tiny remainder fragment is left behind; this reproduces the
    fragment sizes pylance 14's compaction produces."""
    rows = sum(f.count_rows() for f in group)
    files = max(1, rows // target)
    return max(1, -(-rows // files))


def _live_rows(ds, group: list[Fragment], batch_size: int) -> Iterator[pa.RecordBatch]:
    """The group's live rows in order, every column (blobs as their bytes, not their
    descriptors), streamed in batches."""
    scan = ds.scanner(fragments=group, batch_size=batch_size, blob_handling="all_binary")
    return scan.to_batches()


def _default(value, default):
    return default if value is None else value


# pylance compaction options that only tune how it runs: accepted, nothing to do here
_HINTS = frozenset(
    "num_threads max_rows_per_group defer_index_remap binary_copy_read_batch_bytes".split()
)


def _check_options(options: dict, mode: str | None, limits: dict) -> None:
    unknown = sorted(set(options) - _HINTS)
    if unknown:  # as Python (and so pylance) refuses an unknown keyword argument
        raise TypeError(f"compact_files() got an unexpected keyword argument {unknown[0]!r}")
    for name in ("num_threads", "max_rows_per_group"):
        value = options.get(name)
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise InvalidArgumentError(f"{name} must be a positive integer")
    for name, value in limits.items():
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise InvalidDataError(
                f"CompactionOptions::{name} must be greater than 0 (use None for no limit)"
            )
    if mode not in (None, "reencode", "try_binary_copy", "force_binary_copy"):
        raise InvalidArgumentError(f"unknown compaction_mode {mode!r}")
