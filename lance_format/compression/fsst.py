"""FSST string decompression (digest §6.6), vectorised over many strings at once.

Symbol table (always 2312 bytes): a u64 header
``"FSST" << 32 | encoder_switch << 24 | suffix_lim << 16 | terminator << 8 | n_symbols``,
``n`` symbols of 8 bytes, then ``n`` one-byte lengths starting at byte ``8 + 8n``, then
zeros.  ``encoder_switch == 0`` means the strings are stored raw.

Each compressed string is a sequence of codes: a code ``c < 255`` emits ``symbol[c]``
(``len[c]`` bytes), code 255 escapes the next byte, which is emitted literally.  Strings
are independent, so the code/escape/literal role of every byte is decided for all strings
at once: within a maximal run of 0xFF bytes inside one string, the bytes at even distance
from the run start are escapes and those at odd distance are escaped (literal) 0xFF
bytes; a byte right after an escape is a literal.  Output positions are a cumulative sum
of per-byte output lengths (the string offsets map through it); the output is each byte's
piece padded to 8 bytes with the padding masked away.

Training a symbol table (the encoder) is not implemented; :func:`raw_symbol_table` gives
the table for storing strings uncompressed, which every reader accepts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CorruptFileError
from .blocks import VariableWidthBlock

SYMBOL_TABLE_SIZE = 8 + 256 * 8 + 256
MAGIC = 0x46535354
ESCAPE = 255


@dataclass(frozen=True)
class SymbolTable:
    enabled: bool  # encoder_switch: False = the strings are stored raw
    symbols: np.ndarray  # (256, 8) uint8, rows beyond n_symbols are zero
    lengths: np.ndarray  # (256,) int64, 0 beyond n_symbols
    n_symbols: int


def parse_symbol_table(table: bytes | np.ndarray) -> SymbolTable:
    """Parse the 2312-byte table stored in ``Fsst.symbol_table``."""
    raw = bytes(table) if not isinstance(table, np.ndarray) else table.tobytes()
    if len(raw) != SYMBOL_TABLE_SIZE:
        raise CorruptFileError(
            f"FSST symbol table has {len(raw)} bytes, expected {SYMBOL_TABLE_SIZE}"
        )
    header = int.from_bytes(raw[:8], "little")
    if header >> 32 != MAGIC:
        raise CorruptFileError("FSST symbol table does not start with the FSST magic")
    enabled = bool((header >> 24) & 1)
    n = header & 0xFF
    buf = np.frombuffer(raw, dtype=np.uint8)
    symbols = np.zeros((256, 8), dtype=np.uint8)
    symbols[:n] = buf[8 : 8 + 8 * n].reshape(n, 8)
    lengths = np.zeros(256, dtype=np.int64)
    lengths[:n] = buf[8 + 8 * n : 8 + 9 * n]
    if (lengths[:n] > 8).any():
        raise CorruptFileError("FSST symbol longer than 8 bytes")
    return SymbolTable(enabled, symbols, lengths, n)


def raw_symbol_table() -> bytes:
    """A table with ``encoder_switch = 0``: the strings that go with it are stored as-is."""
    out = bytearray(SYMBOL_TABLE_SIZE)
    out[:8] = (MAGIC << 32).to_bytes(8, "little")
    return bytes(out)


def decompress(block: VariableWidthBlock, table: SymbolTable | bytes) -> VariableWidthBlock:
    """Decompress every string of ``block`` with one symbol table."""
    if not isinstance(table, SymbolTable):
        table = parse_symbol_table(table)
    if not table.enabled:
        return block
    offsets = np.asarray(block.offsets, dtype=np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    if end > len(block.data) or (np.diff(offsets) < 0).any():
        raise CorruptFileError("FSST input offsets run past the compressed bytes")
    data = np.asarray(block.data[start:end], dtype=np.uint8)
    rel = offsets - start
    n = len(data)
    if n == 0:
        return VariableWidthBlock(np.zeros_like(offsets), data, block.bits_per_offset)

    string_start = np.zeros(n, dtype=bool)
    string_start[rel[:-1][rel[:-1] < rel[1:]]] = True  # starts of non-empty strings

    # roles of the 0xFF bytes (usually few): in a run of them inside one string, even
    # distances from the run start are escapes, odd ones escaped literals
    ff = np.flatnonzero(data == ESCAPE)
    run_begin = np.ones(len(ff), dtype=bool)
    run_begin[1:] = (ff[1:] != ff[:-1] + 1) | string_start[ff[1:]]
    run_start = np.maximum.accumulate(np.where(run_begin, ff, -1)) if len(ff) else ff
    escapes = ff[(ff - run_start) % 2 == 0]
    # the byte after an escape is a literal, unless a new string starts there
    after = escapes + 1
    literals = after[(after < n)]
    literals = literals[~string_start[literals]]

    # one table row per byte: 0..255 symbols, 256 + b the literal b, 512 an escape
    rows = data.astype(np.int16)
    rows[literals] += 256
    rows[escapes] = 512
    if n and int(rows[rows < 256].max(initial=-1)) >= table.n_symbols:
        raise CorruptFileError(f"FSST code beyond the {table.n_symbols} symbols")
    lens = np.zeros(513, dtype=np.int64)
    lens[:256] = table.lengths
    lens[256:512] = 1
    out_len = lens[rows]

    csum = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(out_len, out=csum[1:])
    table8 = np.zeros((513, 8), dtype=np.uint8)
    table8[:256] = table.symbols
    table8[256:512, 0] = np.arange(256, dtype=np.uint8)
    # output byte j comes from code `src[j]`, at position `j - csum[src[j]]` of its symbol
    total = int(csum[-1])
    # so its table byte is 8*src + j - csum[src]: one repeat of a per-code shift, plus j
    shift = rows.astype(np.int64) * 8 - csum[:-1]
    idx = np.repeat(shift, out_len)
    idx += np.arange(total, dtype=np.int64)
    out = table8.reshape(-1)[idx]
    return VariableWidthBlock(csum[rel], out, block.bits_per_offset)
