"""FixedSizeList (docs/format/compression.md): a list of ``dimension`` items per value, flattened.

Item validity inside an FSL is not a def level; with ``has_validity`` a bitmap (LSB first,
1 = valid) over the layer's flattened items travels next to the values:

* **mini-block**: one extra value buffer per layer with validity, outermost layer first,
  before the values buffer; in each chunk the bitmap covers the chunk's items from bit 0.
* **full-zip (per value)**: every row is ``[bitmap of each validity layer, ceil(items/8)
  bytes][the row's value bytes]``.

Nested FSLs are nested messages; ``layers`` below lists them outermost first as
``(dimension, has_validity)``.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptFileError, UnsupportedError
from .blocks import Block, ChunkRanges, FixedSizeListBlock, FixedWidthBlock
from .flat import join_bitmaps, pack_bools, unpack_bools


def decode_validity_chunks(chunks: ChunkRanges, item_counts: np.ndarray) -> np.ndarray:
    """The per-chunk validity bitmaps of a mini-block page as one bool array."""
    item_counts = np.asarray(item_counts, dtype=np.int64)
    need = (item_counts + 7) // 8
    if (np.asarray(chunks.lengths) < need).any() or (
        np.asarray(chunks.starts) + need > len(chunks.base)
    ).any():
        raise CorruptFileError("an FSL validity buffer is shorter than its items need")
    bitmap = join_bitmaps(chunks.base, np.asarray(chunks.starts, dtype=np.int64), item_counts)
    return unpack_bools(bitmap, int(item_counts.sum()))


def nest(
    items: FixedWidthBlock, layers: list[tuple[int, bool]], validities: list[np.ndarray | None]
) -> FixedSizeListBlock:
    """Wrap flattened items in the FSL layers (outermost first)."""
    block: Block = items
    for (dim, _), validity in zip(reversed(layers), reversed(validities), strict=True):
        block = FixedSizeListBlock(block, dim, validity)
    return block  # type: ignore[return-value]


def unzip_rows(
    rows: FixedWidthBlock, layers: list[tuple[int, bool]], bits_per_item: int
) -> FixedSizeListBlock:
    """Per-value (full-zip) rows ``[bitmaps][values]`` to nested FSL blocks."""
    n = rows.num_values
    cum = 1
    bitmap_sizes: list[tuple[int, int] | None] = []
    row_bytes = 0
    for dim, has_validity in layers:
        cum *= dim
        if has_validity:
            bitmap_sizes.append((row_bytes, cum))
            row_bytes += (cum + 7) // 8
        else:
            bitmap_sizes.append(None)
    if (bits_per_item * cum) % 8 or (bits_per_item % 8 and any(bitmap_sizes)):
        raise UnsupportedError(f"FSL rows of {cum} items of {bits_per_item} bits")
    data_bytes = bits_per_item * cum // 8
    row_bytes += data_bytes
    if rows.bits_per_value != row_bytes * 8:
        raise CorruptFileError(
            f"FSL rows are {rows.bits_per_value} bits, the encoding describes {row_bytes * 8}"
        )
    if len(rows.data) < n * row_bytes:
        raise CorruptFileError("FSL per-value data is shorter than its rows")
    if not any(bitmap_sizes):
        items = FixedWidthBlock(np.asarray(rows.data[: n * row_bytes]), bits_per_item, n * cum)
        return nest(items, layers, [None] * len(layers))
    table = np.asarray(rows.data[: n * row_bytes]).reshape(n, row_bytes)
    validities: list[np.ndarray | None] = []
    for spec in bitmap_sizes:
        if spec is None:
            validities.append(None)
            continue
        off, bits = spec
        nb = (bits + 7) // 8
        bitmap = np.unpackbits(table[:, off : off + nb], axis=1, bitorder="little")[:, :bits]
        validities.append(bitmap.reshape(-1).astype(bool))
    values = np.ascontiguousarray(table[:, row_bytes - data_bytes :]).reshape(-1)
    return nest(FixedWidthBlock(values, bits_per_item, n * cum), layers, validities)


def zip_rows(block: FixedSizeListBlock) -> FixedWidthBlock:
    """The full-zip row form of an FSL block (writer side): bitmaps then values per row."""
    layers: list[tuple[int, np.ndarray | None]] = []
    node: Block = block
    while isinstance(node, FixedSizeListBlock):
        layers.append((node.dimension, node.validity))
        node = node.child
    items = node
    if not isinstance(items, FixedWidthBlock) or items.bits_per_value % 8:
        raise UnsupportedError("FSL rows need byte-wide fixed-width items")
    n = block.num_values
    cum = 1
    parts = []
    for dim, validity in layers:
        cum *= dim
        if validity is not None:
            nb = (cum + 7) // 8
            bits = np.zeros((n, nb * 8), dtype=bool)
            bits[:, :cum] = np.asarray(validity, dtype=bool).reshape(n, cum)
            parts.append(np.packbits(bits, axis=1, bitorder="little"))
    width = items.bits_per_value // 8 * cum
    parts.append(np.asarray(items.data[: n * width]).reshape(n, width))
    table = np.concatenate(parts, axis=1)
    return FixedWidthBlock(table.reshape(-1), table.shape[1] * 8, n)


def encode_validity_chunks(
    validity: np.ndarray, item_counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-chunk bitmaps (each starting at bit 0) of a flattened validity array."""
    item_counts = np.asarray(item_counts, dtype=np.int64)
    validity = np.asarray(validity, dtype=bool)
    nbytes = (item_counts + 7) // 8
    padded_len = int((nbytes * 8).sum())
    chunk_of = np.repeat(np.arange(len(item_counts)), item_counts)
    within = np.arange(len(validity)) - (np.cumsum(item_counts) - item_counts)[chunk_of]
    dest = (np.cumsum(nbytes) - nbytes)[chunk_of] * 8 + within
    bits = np.zeros(padded_len, dtype=bool)
    bits[dest] = validity
    return pack_bools(bits), nbytes
