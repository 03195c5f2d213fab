"""Dispatch a ``lance.encodings21.CompressiveEncoding`` tree to the codecs, per context.

The same encoding means different bytes in different places (docs/format/compression.md), so there
is one entry point per context:

* :func:`decompress_miniblock`: the value buffers of many mini-block chunks at once;
* :func:`decompress_block`: one whole buffer (dictionaries, rep/def levels);
* :func:`decompress_per_value`: full-zip values already cut apart by the layout;
* :func:`decompress_levels` / :func:`decompress_levels_chunks`: rep/def levels as uint16.

Only this module reads the protobuf; the codecs take plain numpy arrays and ints.  Any
low-level failure on bad bytes (IndexError, ValueError from a reshape, ...) is reported as
:class:`CorruptFileError` naming the encoding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from ..errors import CorruptFileError, LanceError, UnsupportedError
from . import bitpacking, bss, flat, fsl, fsst, general, packed, rle, variable
from .blocks import (
    Block,
    ChunkRanges,
    FixedSizeListBlock,
    FixedWidthBlock,
    StructBlock,
    VariableWidthBlock,
    gather_ranges,
)

# lance.encodings21.CompressionScheme
_SCHEMES = {1: general.LZ4, 2: general.ZSTD}


# -- helpers ---------------------------------------------------------------------------------


def _kind(enc) -> str:
    kind = enc.WhichOneof("compression") if enc is not None else None
    if kind is None:
        raise CorruptFileError("a compressive encoding is missing or empty")
    return kind


def _flat_bits(enc, what: str) -> int:
    kind = _kind(enc)
    if kind != "flat":
        raise UnsupportedError(f"{what} encoded with {describe(enc)} (only Flat is supported)")
    return int(enc.flat.bits_per_value)


def _scheme(general_msg) -> str:
    scheme = int(general_msg.compression.scheme)
    try:
        return _SCHEMES[scheme]
    except KeyError:
        raise UnsupportedError(f"general compression scheme {scheme}") from None


def _need(buffers: list, n: int, enc) -> None:
    if len(buffers) < n:
        raise CorruptFileError(
            f"{describe(enc)} needs {n} value buffers, the page has {len(buffers)}"
        )


def _check_count(block: Block, expected: int, enc) -> Block:
    if block.num_values != expected:
        raise CorruptFileError(
            f"{describe(enc)} decoded {block.num_values} values, expected {expected}"
        )
    return block


@contextmanager
def _guard(enc, context: str) -> Iterator[None]:
    try:
        yield
    except LanceError:
        raise
    except (IndexError, ValueError, OverflowError, MemoryError) as e:
        raise CorruptFileError(f"cannot decode {describe(enc)} ({context}): {e}") from e


def describe(enc) -> str:
    """A short human-readable form of an encoding tree, e.g. ``General[zstd](BSS(Flat64))``."""
    if enc is None:
        return "<none>"
    kind = enc.WhichOneof("compression")
    if kind is None:
        return "<empty>"
    m = getattr(enc, kind)
    if kind == "flat":
        return f"Flat{m.bits_per_value}"
    if kind == "variable":
        return f"Variable({describe(m.offsets)})"
    if kind == "inline_bitpacking":
        return f"InlineBitpacking{m.uncompressed_bits_per_value}"
    if kind == "out_of_line_bitpacking":
        return f"OutOfLineBitpacking{m.uncompressed_bits_per_value}({describe(m.values)})"
    if kind == "fsst":
        return f"Fsst({describe(m.values)})"
    if kind == "rle":
        return f"Rle({describe(m.values)}, {describe(m.run_lengths)})"
    if kind == "byte_stream_split":
        return f"BSS({describe(m.values)})"
    if kind == "general":
        scheme = _SCHEMES.get(int(m.compression.scheme), str(m.compression.scheme))
        return f"General[{scheme}]({describe(m.values)})"
    if kind == "fixed_size_list":
        v = "+validity" if m.has_validity else ""
        return f"FixedSizeList{m.items_per_value}{v}({describe(m.values)})"
    if kind == "packed_struct":
        return f"PackedStruct{list(m.bits_per_value)}({describe(m.values)})"
    if kind == "variable_packed_struct":
        return f"VariablePackedStruct[{', '.join(describe(f.value) for f in m.fields)}]"
    return kind


def _as_fixed(block: Block, enc) -> FixedWidthBlock:
    if not isinstance(block, FixedWidthBlock):
        raise CorruptFileError(
            f"{describe(enc)} needs fixed-width values, got {type(block).__name__}"
        )
    return block


def _as_variable(block: Block, enc) -> VariableWidthBlock:
    if not isinstance(block, VariableWidthBlock):
        raise CorruptFileError(
            f"{describe(enc)} needs variable-width values, got {type(block).__name__}"
        )
    return block


# -- mini-block ------------------------------------------------------------------------------


def decompress_miniblock(enc, buffers: list[ChunkRanges], counts: np.ndarray) -> Block:
    """Decode value buffers ``buffers[j]`` of every chunk; chunk i holds ``counts[i]`` values.

    Returns one block with all chunks' values in order.
    """
    counts = np.asarray(counts, dtype=np.int64)
    with _guard(enc, "mini-block"):
        block = _miniblock(enc, list(buffers), counts)
        return _check_count(block, int(counts.sum()), enc)


def deferred_miniblock(enc) -> tuple[object, Callable[[Block], Block] | None]:
    """Split off a final per-value step that can run after rows are selected.

    FSST compresses each string on its own, so a take can pick the wanted compressed
    strings first and decompress only those; returns (the encoding to decode first,
    the step to apply to the selected values) or (enc, None) when nothing can wait.
    """
    if enc is not None and enc.WhichOneof("compression") == "fsst":
        m = enc.fsst
        table = fsst.parse_symbol_table(m.symbol_table)

        def finish(block: Block) -> Block:
            with _guard(enc, "mini-block"):
                return fsst.decompress(_as_variable(block, enc), table)

        return m.values, finish
    return enc, None


def _miniblock(enc, buffers: list[ChunkRanges], counts: np.ndarray) -> Block:
    kind = _kind(enc)
    m = getattr(enc, kind)
    if kind == "flat":
        _need(buffers, 1, enc)
        return flat.decode_chunks(buffers[0], counts, int(m.bits_per_value))
    if kind == "variable":
        _need(buffers, 1, enc)
        bits = _flat_bits(m.offsets, "Variable offsets")
        return variable.decode_chunks(buffers[0], counts, bits)
    if kind == "fsst":
        table = fsst.parse_symbol_table(m.symbol_table)
        if _kind(m.values) == "variable":  # the usual nesting: decoded in one pass
            _need(buffers, 1, enc)
            bits = _flat_bits(m.values.variable.offsets, "Variable offsets")
            return fsst.decompress_chunks(buffers[0], counts, bits, table)
        inner = _as_variable(_miniblock(m.values, buffers, counts), enc)
        return fsst.decompress(inner, table)
    if kind == "inline_bitpacking":
        _need(buffers, 1, enc)
        t = int(m.uncompressed_bits_per_value)
        values = bitpacking.decode_inline_chunks(buffers[0], counts, t)
        return FixedWidthBlock(values.view(np.uint8), t, len(values))
    if kind == "out_of_line_bitpacking":
        _need(buffers, 1, enc)
        t = int(m.uncompressed_bits_per_value)
        w = _flat_bits(m.values, "OutOfLineBitpacking values")
        values = bitpacking.decode_out_of_line_chunks(buffers[0], counts, w, t)
        return FixedWidthBlock(values.view(np.uint8), t, len(values))
    if kind == "rle":
        _need(buffers, 2, enc)
        bits = _flat_bits(m.values, "Rle values")
        if _flat_bits(m.run_lengths, "Rle run lengths") != 8:
            raise UnsupportedError(f"{describe(enc)}: run lengths must be 8 bits")
        return rle.decode_chunks(buffers[0], buffers[1], counts, bits)
    if kind == "byte_stream_split":
        _need(buffers, 1, enc)
        return bss.decode_chunks(buffers[0], counts, _flat_bits(m.values, "BSS values"))
    if kind == "general":
        _need(buffers, 1, enc)
        first = general.decompress_chunks(buffers[0], _scheme(m))
        return _miniblock(m.values, [first, *buffers[1:]], counts)
    if kind == "fixed_size_list":
        dim = int(m.items_per_value)
        items = counts * dim
        validity = None
        if m.has_validity:
            _need(buffers, 2, enc)
            validity = fsl.decode_validity_chunks(buffers[0], items)
            buffers = buffers[1:]
        child = _check_count(_miniblock(m.values, buffers, items), int(items.sum()), m.values)
        return FixedSizeListBlock(child, dim, validity)
    if kind == "packed_struct":
        packed_rows = _as_fixed(_miniblock(m.values, buffers, counts), enc)
        return packed.unpack_fixed(packed_rows, [int(b) for b in m.bits_per_value])
    raise UnsupportedError(f"{describe(enc)} is not supported in mini-block pages")


# -- block -----------------------------------------------------------------------------------


def decompress_block(enc, data: np.ndarray, num_values: int) -> Block:
    """Decode one whole buffer (a dictionary, or a rep/def level buffer)."""
    data = np.asarray(data, dtype=np.uint8)
    with _guard(enc, "block"):
        return _check_count(_block(enc, data, int(num_values)), int(num_values), enc)


def _block(enc, data: np.ndarray, n: int) -> Block:
    kind = _kind(enc)
    m = getattr(enc, kind)
    if kind == "flat":
        return flat.decode_block(data, int(m.bits_per_value), n)
    if kind == "variable":
        block = variable.decode_block(data, n)
        _flat_bits(m.offsets, "Variable offsets")
        return block
    if kind == "general":
        return _block(m.values, general.decompress_buffer(data, _scheme(m)), n)
    if kind == "inline_bitpacking":
        t = int(m.uncompressed_bits_per_value)
        values = bitpacking.decode_inline_block(data, n, t)
        return FixedWidthBlock(values.view(np.uint8), t, n)
    if kind == "out_of_line_bitpacking":
        t = int(m.uncompressed_bits_per_value)
        w = _flat_bits(m.values, "OutOfLineBitpacking values")
        values = bitpacking.decode_out_of_line(data, n, w, t)
        return FixedWidthBlock(values.view(np.uint8), t, n)
    if kind == "rle":
        bits = _flat_bits(m.values, "Rle values")
        if _flat_bits(m.run_lengths, "Rle run lengths") != 8:
            raise UnsupportedError(f"{describe(enc)}: run lengths must be 8 bits")
        return rle.decode_block(data, n, bits)
    if kind == "fixed_size_list" and not m.has_validity:
        dim = int(m.items_per_value)
        return FixedSizeListBlock(_block(m.values, data, n * dim), dim)
    if kind == "constant" and m.HasField("value"):
        return _constant(bytes(m.value), n)
    raise UnsupportedError(f"{describe(enc)} is not supported in block context")


def _constant(value: bytes, n: int) -> FixedWidthBlock:
    if not value:
        raise UnsupportedError("Constant encoding with an empty value")
    data = np.tile(np.frombuffer(value, dtype=np.uint8), n)
    return FixedWidthBlock(data, len(value) * 8, n)


# -- per value (full-zip) --------------------------------------------------------------------


def decompress_per_value(enc, values: Block) -> Block:
    """Undo per-value ("transparent") compression of full-zip values.

    ``values`` is what the layout cut out: a VariableWidthBlock of stored value bytes, or a
    FixedWidthBlock of fixed-width rows.
    """
    with _guard(enc, "per-value"):
        return _check_count(_per_value(enc, values), values.num_values, enc)


def _per_value(enc, values: Block) -> Block:
    kind = _kind(enc)
    m = getattr(enc, kind)
    if kind == "flat":
        block = _as_fixed(values, enc)
        bits = int(m.bits_per_value)
        if block.bits_per_value != bits:
            raise CorruptFileError(f"{describe(enc)} rows are {block.bits_per_value} bits")
        return block
    if kind == "variable":
        var = _as_variable(values, enc)
        bits = _flat_bits(m.offsets, "Variable offsets")
        return VariableWidthBlock(var.offsets, var.data, bits)
    if kind == "fsst":
        inner = _as_variable(_per_value(m.values, values), enc)
        return fsst.decompress(inner, fsst.parse_symbol_table(m.symbol_table))
    if kind == "general":
        unframed = general.decompress_values(_as_variable(values, enc), _scheme(m))
        return _per_value(m.values, unframed)
    if kind == "fixed_size_list":
        layers: list[tuple[int, bool]] = []
        node = enc
        while _kind(node) == "fixed_size_list":
            layers.append(
                (int(node.fixed_size_list.items_per_value), node.fixed_size_list.has_validity)
            )
            node = node.fixed_size_list.values
        if _kind(node) == "constant" and not node.constant.HasField("value"):
            bits = 0  # every item is null: the rows hold only validity bitmaps
        else:
            bits = _flat_bits(node, "FixedSizeList items")
        return fsl.unzip_rows(_as_fixed(values, enc), layers, bits)
    if kind == "variable_packed_struct":
        rows = _as_variable(values, enc)
        fields = []
        for f in m.fields:
            layout = f.WhichOneof("layout")
            if layout == "bits_per_value":
                fields.append(packed.PackedField(False, int(f.bits_per_value)))
            elif layout == "bits_per_length":
                fields.append(packed.PackedField(True, int(f.bits_per_length)))
            else:
                raise CorruptFileError("VariablePackedStruct field has no layout")
        raw = packed.unpack_variable(rows, fields)
        children = [_per_value(f.value, c) for f, c in zip(m.fields, raw, strict=True)]
        return StructBlock(children, rows.num_values)
    if kind == "packed_struct":
        packed_rows = _as_fixed(_per_value(m.values, values), enc)
        return packed.unpack_fixed(packed_rows, [int(b) for b in m.bits_per_value])
    if kind == "constant" and m.HasField("value"):
        return _constant(bytes(m.value), values.num_values)
    raise UnsupportedError(f"{describe(enc)} is not supported for full-zip values")


# -- levels ----------------------------------------------------------------------------------


def _to_levels(block: Block, enc) -> np.ndarray:
    block = _as_fixed(block, enc)
    bits = block.bits_per_value
    n = block.num_values
    if bits == 16:
        return np.ascontiguousarray(block.data[: 2 * n]).view("<u2")
    if bits not in (8, 32, 64):
        raise UnsupportedError(f"rep/def levels of {bits} bits")
    wide = np.ascontiguousarray(block.data[: n * bits // 8]).view(f"<u{bits // 8}")
    if len(wide) and int(wide.max()) > 0xFFFF:
        raise CorruptFileError("a rep/def level does not fit in 16 bits")
    return wide.astype(np.uint16)


def decompress_levels(enc, data: np.ndarray, num_levels: int) -> np.ndarray:
    """Decode a rep or def buffer to ``num_levels`` uint16 levels (``enc=None``: raw u16)."""
    data = np.asarray(data, dtype=np.uint8)
    if enc is None:
        if len(data) != 2 * num_levels:
            raise CorruptFileError(
                f"raw levels buffer has {len(data)} bytes for {num_levels} levels"
            )
        return np.ascontiguousarray(data).view("<u2")
    with _guard(enc, "levels"):
        return _to_levels(_check_count(_block(enc, data, num_levels), num_levels, enc), enc)


def decompress_levels_chunks(enc, ranges: ChunkRanges, num_levels: np.ndarray) -> np.ndarray:
    """The rep or def buffers of many mini-block chunks, all at once, as one uint16 array.

    Flat16, OutOfLineBitpacking(16) and block Rle (what pylance writes) are decoded without
    a loop per chunk; other encodings fall back to one call per chunk.
    """
    num_levels = np.asarray(num_levels, dtype=np.int64)
    total = int(num_levels.sum())
    with _guard(enc, "levels"):
        kind = _kind(enc)
        if kind == "flat" and enc.flat.bits_per_value == 16:
            if (np.asarray(ranges.lengths) != 2 * num_levels).any():
                raise CorruptFileError("raw level buffers do not match the level counts")
            raw = gather_ranges(ranges.base, ranges.starts, ranges.lengths)
            return np.ascontiguousarray(raw).view("<u2")
        if (
            kind == "out_of_line_bitpacking"
            and enc.out_of_line_bitpacking.uncompressed_bits_per_value == 16
        ):
            w = _flat_bits(enc.out_of_line_bitpacking.values, "OutOfLineBitpacking values")
            return bitpacking.decode_out_of_line_chunks(ranges, num_levels, w, 16)
        if kind == "rle":
            bits = _flat_bits(enc.rle.values, "Rle values")
            if _flat_bits(enc.rle.run_lengths, "Rle run lengths") != 8:
                raise UnsupportedError(f"{describe(enc)}: run lengths must be 8 bits")
            block = rle.decode_block_chunks(ranges, num_levels, bits)
            return _to_levels(block, enc)
        parts = [
            decompress_levels(enc, ranges.base[s : s + n], c)
            for s, n, c in zip(
                np.asarray(ranges.starts).tolist(),
                np.asarray(ranges.lengths).tolist(),
                num_levels.tolist(),
                strict=True,
            )
        ]
        out = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint16)
        if len(out) != total:
            raise CorruptFileError(f"decoded {len(out)} levels, the chunks say {total}")
        return out
