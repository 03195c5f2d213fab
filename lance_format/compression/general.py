"""General compression (docs/format/compression.md): zstd or LZ4 around the output of an inner
encoding.

Framing, the same in every context:

* zstd: ``u64 LE uncompressed length`` then a zstd frame.  A bare zstd frame (magic
  ``28 b5 2f fd`` with the frame header's reserved bit clear) is accepted too.
* LZ4: ``u32 LE uncompressed length`` then an LZ4 *block* (``lz4.block`` with
  ``store_size=True`` writes exactly this).

Where it is applied depends on the context: in mini-block pages only value buffer 0 of each
chunk is compressed, in full-zip pages every value separately, and a block (dictionary)
once as a whole.  The libraries work on one buffer at a time, so these loops are per chunk
or per value by necessity.
"""

from __future__ import annotations

import threading
from itertools import pairwise

import lz4.block
import numpy as np
import zstandard

from ..errors import CorruptFileError, UnsupportedError
from .blocks import ChunkRanges, VariableWidthBlock

ZSTD = "zstd"
LZ4 = "lz4"
SCHEMES = (ZSTD, LZ4)
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# The largest expansion accepted from a length prefix: zstd can shrink highly repetitive data
# by about 2**15, LZ4 by about 255.  Anything above is a corrupt prefix, not data.
_ZSTD_MAX_RATIO = 1 << 16
_LZ4_MAX_RATIO = 256
_SLACK = 1 << 16


class _ZstdContexts(threading.local):
    """This thread's zstd contexts.  A python-zstandard compressor or decompressor must not
    be used by two threads at once (it holds one zstd context and releases the GIL inside
    it): decode threads sharing one decompressor misread valid pages ("Unknown frame
    descriptor") or crash the process.  Kept per thread rather than made per buffer: a new
    compressor costs about 9 us, compressing a small buffer about 1."""

    def __init__(self) -> None:
        self.decompressor = zstandard.ZstdDecompressor()
        self.compressors: dict[int, zstandard.ZstdCompressor] = {}

    def compressor(self, level: int) -> zstandard.ZstdCompressor:
        c = self.compressors.get(level)
        if c is None:
            c = self.compressors[level] = zstandard.ZstdCompressor(level=level)
        return c


_zstd = _ZstdContexts()


def _check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise UnsupportedError(f"general compression scheme {scheme!r}")


def _is_bare_zstd(buf: bytes) -> bool:
    """The reference reader's test: a frame starts with the magic and a clear reserved bit;
    a length-prefixed buffer almost never does."""
    if len(buf) < 8:
        return True
    return buf[:4] == _ZSTD_MAGIC and not (buf[4] & 0x10)


def decompress_buffer(data: np.ndarray | bytes, scheme: str) -> np.ndarray:
    """Decompress one framed buffer to uint8."""
    _check_scheme(scheme)
    buf = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    if not buf:
        return np.zeros(0, dtype=np.uint8)
    try:
        if scheme == ZSTD:
            if _is_bare_zstd(buf):
                # a decompressobj works in its decompressor's context: this thread's
                out = _zstd.decompressor.decompressobj(read_across_frames=True).decompress(buf)
            else:
                n = int.from_bytes(buf[:8], "little")
                if n > len(buf) * _ZSTD_MAX_RATIO + _SLACK:
                    raise CorruptFileError(
                        f"zstd length prefix {n} is implausible for {len(buf)} bytes"
                    )
                out = _zstd.decompressor.decompress(buf[8:], max_output_size=n) if n else b""
                if len(out) != n:
                    raise CorruptFileError(f"zstd frame gave {len(out)} bytes, prefix says {n}")
        else:
            if len(buf) < 4:
                raise CorruptFileError("LZ4 buffer is shorter than its length prefix")
            n = int.from_bytes(buf[:4], "little")
            if n > len(buf) * _LZ4_MAX_RATIO + _SLACK:
                raise CorruptFileError(f"LZ4 length prefix {n} is implausible for {len(buf)} bytes")
            out = lz4.block.decompress(buf[4:], uncompressed_size=n) if n else b""
    except (zstandard.ZstdError, lz4.block.LZ4BlockError) as e:
        raise CorruptFileError(f"{scheme} decompression failed: {e}") from e
    return np.frombuffer(out, dtype=np.uint8)


def compress_buffer(data: np.ndarray | bytes, scheme: str, level: int | None = None) -> bytes:
    """Compress one buffer with the Lance framing (the writer's side)."""
    _check_scheme(scheme)
    buf = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    if scheme == ZSTD:
        cctx = _zstd.compressor(level if level else 3)
        return len(buf).to_bytes(8, "little") + cctx.compress(buf)
    return lz4.block.compress(buf, store_size=True)


def decompress_chunks(chunks: ChunkRanges, scheme: str) -> ChunkRanges:
    """Decompress buffer 0 of every mini-block chunk; returns the decompressed ranges."""
    starts = np.asarray(chunks.starts, dtype=np.int64).tolist()
    lengths = np.asarray(chunks.lengths, dtype=np.int64).tolist()
    if any(s + n > len(chunks.base) for s, n in zip(starts, lengths, strict=True)):
        raise CorruptFileError("a compressed mini-block buffer runs past the chunk data")
    parts = [
        decompress_buffer(chunks.base[s : s + n], scheme)
        for s, n in zip(starts, lengths, strict=True)
    ]
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    base = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)
    return ChunkRanges(base, np.cumsum(sizes) - sizes, sizes)


def compress_chunks(
    buffer: np.ndarray, sizes: np.ndarray, scheme: str, level: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Compress each chunk's slice of ``buffer`` separately; returns (buffer, new sizes)."""
    starts = (np.cumsum(sizes) - sizes).tolist()
    parts = [
        compress_buffer(buffer[s : s + n], scheme, level)
        for s, n in zip(starts, np.asarray(sizes).tolist(), strict=True)
    ]
    out = np.frombuffer(b"".join(parts), dtype=np.uint8)
    return out, np.array([len(p) for p in parts], dtype=np.int64)


def decompress_values(block: VariableWidthBlock, scheme: str) -> VariableWidthBlock:
    """Per-value (full-zip) decompression: each value is a separately framed buffer."""
    offsets = np.asarray(block.offsets, dtype=np.int64)
    if len(offsets) and (offsets[-1] > len(block.data) or (np.diff(offsets) < 0).any()):
        raise CorruptFileError("compressed value offsets run past the data")
    bounds = offsets.tolist()
    parts = [decompress_buffer(block.data[a:b], scheme) for a, b in pairwise(bounds)]
    lengths = np.array([len(p) for p in parts], dtype=np.int64)
    new_offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    data = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)
    return VariableWidthBlock(new_offsets, data, block.bits_per_offset)


def compress_values(
    block: VariableWidthBlock, scheme: str, level: int | None = None
) -> VariableWidthBlock:
    """Per-value compression for full-zip pages."""
    bounds = np.asarray(block.offsets, dtype=np.int64).tolist()
    data = np.asarray(block.data)
    parts = [compress_buffer(data[a:b], scheme, level) for a, b in pairwise(bounds)]
    lengths = np.array([len(p) for p in parts], dtype=np.int64)
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return VariableWidthBlock(
        offsets, np.frombuffer(b"".join(parts), dtype=np.uint8), block.bits_per_offset
    )
