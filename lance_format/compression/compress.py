"""Choose and apply compressive encodings (the writer's side of :mod:`.decompress`).

The same three contexts as the reader (docs/format/compression.md):

* :func:`compress_miniblock`: a page's values cut into mini-block chunks (each chunk a
  power of two values, about 4 KiB), with the encoding tree that describes every chunk;
* :func:`compress_block`: one whole buffer (dictionary items);
* :func:`compress_per_value`: full-zip values, each compressed on its own;
* :func:`compress_levels`: rep/def levels of the chunks of a page (block context).

The choice follows pylance's strategy where it matters for size (docs/format/compression.md):
bitpacking for integers that do not use their width, RLE when runs are long (``rle-threshold``),
FSST for string pages of at least 32 KiB, general zstd/lz4 (optionally over byte-stream-split) when
the field asks for it, and the smallest of the candidates otherwise.  Field metadata
arrives parsed as :class:`ColumnOptions`.
"""

from __future__ import annotations

import functools
import threading
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgumentError, UnsupportedError
from ..jit import kernel, readonly
from ..pb import encodings_v2_1_pb2 as pb
from ..version import LanceFileVersion
from . import bitpacking, bss, flat, fsl, fsst, general, packed, rle, variable
from .blocks import (
    Block,
    FixedSizeListBlock,
    FixedWidthBlock,
    StructBlock,
    VariableWidthBlock,
)

CHUNK_BYTES = 4096  # what pylance aims a mini-block chunk at
MAX_CHUNK_VALUES = 4096
FSST_MIN_PAGE_BYTES = 32 * 1024
FSST_MIN_MAX_LENGTH = 5
GENERAL_MIN_BYTES = 4096
_SCHEME_IDS = {
    general.LZ4: pb.COMPRESSION_ALGORITHM_LZ4,
    general.ZSTD: pb.COMPRESSION_ALGORITHM_ZSTD,
}


@dataclass(frozen=True)
class ColumnOptions:
    """The ``lance-encoding:*`` field metadata that steers the writer (docs/format/compression.md).

    Dictionary settings (``dict-divisor``, ``dict-size-ratio``, ``dict-values-compression``)
    are read by :mod:`.dictionary` itself from the raw metadata.
    """

    compression: str | None = None  # "zstd" | "lz4" | None
    compression_level: int | None = None
    bss: str = "auto"  # "on" | "off" | "auto"
    rle_threshold: float = 0.5
    structural_encoding: str | None = None  # "miniblock" | "fullzip"
    packed: bool = False
    blob: bool = False

    @classmethod
    def from_metadata(cls, md: dict | None) -> ColumnOptions:
        if not md:
            return _DEFAULT_OPTIONS  # frozen: one instance serves every plain field
        md = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in md.items()
        }

        def get(name: str) -> str | None:
            return md.get("lance-encoding:" + name)

        kw: dict = {}
        comp = get("compression")
        if comp is not None:
            comp = comp.lower()
            if comp in ("none", ""):
                comp = None
            elif comp not in (general.ZSTD, general.LZ4):
                raise InvalidArgumentError(
                    f"lance-encoding:compression={comp!r}: expected zstd, lz4 or none"
                )
            kw["compression"] = comp
        try:
            if (level := get("compression-level")) is not None:
                kw["compression_level"] = int(level)
            if (threshold := get("rle-threshold")) is not None:
                kw["rle_threshold"] = float(threshold)
        except ValueError as e:
            raise InvalidArgumentError(f"bad lance-encoding metadata value: {e}") from None
        if (bss_text := get("bss")) is not None:
            v = bss_text.lower()
            kw["bss"] = {"true": "on", "false": "off"}.get(v, v)
            if kw["bss"] not in ("on", "off", "auto"):
                raise InvalidArgumentError(f"lance-encoding:bss={v!r}: expected on, off or auto")
        se = get("structural-encoding")
        if se is not None:
            se = se.lower().replace("-", "").replace("_", "")
            if se not in ("miniblock", "fullzip"):
                raise InvalidArgumentError(
                    f"lance-encoding:structural-encoding={se!r}: expected miniblock or fullzip"
                )
            kw["structural_encoding"] = se
        kw["packed"] = "lance-encoding:packed" in md or "packed" in md
        kw["blob"] = (get("blob") or "").lower() in ("true", "1", "yes", "on")
        return cls(**kw)


_DEFAULT_OPTIONS = ColumnOptions()


# -- encoding messages -----------------------------------------------------------------------


# The leaf encodings below are built once per width and shared (every column of a small
# append asks for them): a caller embeds them (a protobuf constructor or CopyFrom copies)
# and never modifies one.


@functools.lru_cache(maxsize=256)  # widths are few; a bound all the same
def flat_enc(bits: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=bits))


@functools.lru_cache(maxsize=256)  # widths are few; a bound all the same
def variable_enc(bits: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(variable=pb.Variable(offsets=flat_enc(bits)))


@functools.lru_cache(maxsize=8)
def inline_bitpacking_enc(bits: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(
        inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=bits)
    )


@functools.lru_cache(maxsize=8)
def rle_enc(bits: int) -> pb.CompressiveEncoding:
    """RLE of ``bits``-wide values with 8-bit run lengths."""
    return pb.CompressiveEncoding(rle=pb.Rle(values=flat_enc(bits), run_lengths=flat_enc(8)))


def general_enc(
    scheme: str, inner: pb.CompressiveEncoding, level: int | None = None
) -> pb.CompressiveEncoding:
    bc = pb.BufferCompression(scheme=_SCHEME_IDS[scheme])
    if level is not None:
        bc.level = level
    return pb.CompressiveEncoding(general=pb.General(compression=bc, values=inner))


# -- mini-block ------------------------------------------------------------------------------


@dataclass
class Chunked:
    """A page's values as mini-block chunks: ``buffers[j]`` is (bytes, size per chunk)."""

    encoding: pb.CompressiveEncoding
    counts: np.ndarray  # values per chunk
    buffers: list[tuple[np.ndarray, np.ndarray]]

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b, _ in self.buffers)


def _pow2_floor(x: int) -> int:
    return 1 << max(0, int(x).bit_length() - 1)


def uniform_counts(n: int, per_chunk: int) -> np.ndarray:
    """``n`` values in chunks of ``per_chunk`` (a power of two), the last takes the rest."""
    if 0 < n <= per_chunk:  # a small page: one chunk (no np.full/np.append of nothing)
        return np.array([n], dtype=np.int64)
    full, rest = divmod(n, per_chunk)
    counts = np.full(full, per_chunk, dtype=np.int64)
    return np.append(counts, rest) if rest else counts


@functools.lru_cache(maxsize=256)
def _values_per_chunk(bits: int) -> int:
    """The largest power of two of ``bits``-wide values that fits a ~4 KiB chunk (at least
    one value, at most 4096)."""
    return min(MAX_CHUNK_VALUES, max(1, _pow2_floor(CHUNK_BYTES * 8 // max(bits, 1))))


def _flat_chunks(block: FixedWidthBlock) -> Chunked:
    """Flat values (also packed-struct rows) in ~4 KiB chunks."""
    bits = block.bits_per_value
    n = block.num_values
    data = flat.encode(block)
    if 0 < n <= _values_per_chunk(bits):  # one chunk: counts and size from Python ints
        counts = np.array([n], dtype=np.int64)
        sizes = np.array([(n * bits + 7) // 8], dtype=np.int64)
    else:
        counts = uniform_counts(n, _values_per_chunk(bits))
        sizes = (counts * bits + 7) // 8
    return Chunked(flat_enc(bits), counts, [(data, sizes)])


def _bitpack_chunks(values: np.ndarray, t: int) -> Chunked:
    data, sizes = bitpacking.encode_inline_chunks(values, t)
    counts = uniform_counts(len(values), bitpacking.BLOCK)
    return Chunked(inline_bitpacking_enc(t), counts, [(data, sizes)])


def _rle_chunks(block: FixedWidthBlock) -> Chunked:
    counts, vals, lens, vsizes, lsizes = rle.encode_page(block)
    return Chunked(rle_enc(block.bits_per_value), counts, [(vals, vsizes), (lens, lsizes)])


def _bss_chunks(block: FixedWidthBlock) -> Chunked:
    counts = uniform_counts(block.num_values, _values_per_chunk(block.bits_per_value))
    data, sizes = bss.encode_chunks(block, counts)
    enc = pb.CompressiveEncoding(
        byte_stream_split=pb.ByteStreamSplit(values=flat_enc(block.bits_per_value))
    )
    return Chunked(enc, counts, [(data, sizes)])


def _variable_chunks(block: VariableWidthBlock) -> Chunked:
    counts = variable.plan_chunks(block.offsets, block.bits_per_offset)
    data, sizes = variable.encode_chunks(block, counts)
    return Chunked(variable_enc(block.bits_per_offset), counts, [(data, sizes)])


def _general_wrap(chunked: Chunked, scheme: str, level: int | None) -> Chunked:
    """Compress value buffer 0 of every chunk, if the page is big enough and it helps."""
    data, sizes = chunked.buffers[0]
    if len(data) < GENERAL_MIN_BYTES:
        return chunked
    cdata, csizes = general.compress_chunks(data, sizes, scheme, level)
    if len(cdata) >= len(data):
        return chunked
    return Chunked(
        general_enc(scheme, chunked.encoding),
        chunked.counts,
        [(cdata, csizes), *chunked.buffers[1:]],
    )


def unsigned_view(block: FixedWidthBlock) -> np.ndarray | None:
    """The values as unsigned integers of their width (None if not 8/16/32/64 bits)."""
    dtype = _UNSIGNED.get(block.bits_per_value)
    if dtype is None:
        return None
    return np.asarray(block.data[: block.num_values * dtype.itemsize]).view(dtype)


_UNSIGNED = {bits: np.dtype(f"<u{bits // 8}") for bits in (8, 16, 32, 64)}


def bitpacked_size(values: np.ndarray, t: int) -> int:
    """Bytes InlineBitpacking would take (per 1024-value block: width word + packed words)."""
    if len(values) == 0:
        return 0
    width_sum, _ = _word_stats(readonly(np.ascontiguousarray(values)), bitpacking.BLOCK)
    return _bitpacked_bytes(len(values), t, width_sum)


def _bitpacked_bytes(n: int, t: int, width_sum: int) -> int:
    """InlineBitpacking's size of ``n`` ``t``-bit values whose 1024-value blocks' bit widths
    sum to ``width_sum``: per block a width word, then 128 bytes per bit of width."""
    return -(-n // bitpacking.BLOCK) * (t // 8) + 128 * width_sum


@kernel(*(f"UniTuple(i8, 2)(ro({w}[::1]), i8)" for w in ("u1", "u2", "u4", "u8")))
def _word_stats(words, block_values):  # pragma: no cover - compiled
    """What the choice between Flat, InlineBitpacking and RLE needs, in one pass: the bit
    lengths of each ``block_values`` block's maximum, summed, and the RLE run pieces
    (runs of equal words, split at 255)."""
    n = len(words)
    one = np.uint64(1)
    width_sum = 0
    pieces = 0
    top = np.uint64(0)
    run = 0
    for i in range(n):
        v = np.uint64(words[i])
        if i % block_values == 0 or v > top:
            top = v
        if i == 0 or words[i] != words[i - 1] or run == rle.MAX_RUN:
            pieces += 1
            run = 0
        run += 1
        if i % block_values == block_values - 1 or i == n - 1:
            while top:  # the bit length of the block's maximum
                top = top >> one
                width_sum += 1
    return width_sum, pieces


def run_count(block: FixedWidthBlock) -> int:
    """Runs of equal values (each split at 255, as RLE stores them)."""
    return rle.run_pieces(rle.rows_of(block))


def _fixed_chunks(
    block: FixedWidthBlock,
    opts: ColumnOptions,
    *,
    integer: bool,
    stats: tuple[np.ndarray, int, int] | None = None,
) -> Chunked:
    """Fixed-width values: the smallest of Flat, InlineBitpacking and RLE (by the
    ``rle-threshold`` rule), then General (optionally over BSS) when the field asks.
    ``stats``: the unsigned view, :func:`_word_stats`' answers, when already known."""
    bits = block.bits_per_value
    n = block.num_values
    if opts.compression is not None and bits in (32, 64):
        use_bss = opts.bss == "on" or (
            opts.bss == "auto" and (not integer or opts.compression == general.ZSTD)
        )
        if use_bss:
            return _general_wrap(_bss_chunks(block), opts.compression, opts.compression_level)
    # InlineBitpacking and RLE need values of a native integer width
    u: np.ndarray | None
    if stats is not None:
        u, width_sum, runs = stats
    else:
        u = unsigned_view(block) if n else None
        if u is not None:
            width_sum, runs = _word_stats(readonly(u), bitpacking.BLOCK)
    if u is None:
        base = _flat_chunks(block)
    else:
        best, best_size = "flat", n * bits // 8
        if integer:
            size = _bitpacked_bytes(n, bits, width_sum)
            if size < best_size:
                best, best_size = "ibp", size
        if runs / n < opts.rle_threshold and runs * (bits // 8 + 1) < best_size:
            best = "rle"
        if best == "ibp":
            assert u is not None  # bitpacking is only sized for integers
            base = _bitpack_chunks(u, bits)
        elif best == "rle":
            base = _rle_chunks(block)
        else:
            base = _flat_chunks(block)
    if opts.compression is not None:
        return _general_wrap(base, opts.compression, opts.compression_level)
    return base


def _fsl_chunks(block: FixedSizeListBlock) -> Chunked:
    """Fixed-size lists of fixed-width items: ``FixedSizeList(dim, Flat)``, rows chunked to
    about 4 KiB, with a validity bitmap buffer per nesting level that has null items."""
    layers = []
    node: Block = block
    while isinstance(node, FixedSizeListBlock):
        layers.append(node)
        node = node.child
    if not isinstance(node, FixedWidthBlock):
        raise UnsupportedError("fixed-size lists of variable-width items cannot be written")
    n = block.num_values
    items_per_row = 1
    for layer in layers:
        items_per_row *= layer.dimension
    row_bits = items_per_row * node.bits_per_value
    counts = uniform_counts(n, _values_per_chunk(row_bits))
    buffers = []
    cum = 1
    for layer in layers:
        cum *= layer.dimension
        if layer.validity is not None:
            buffers.append(fsl.encode_validity_chunks(layer.validity, counts * cum))
    item_counts = counts * items_per_row
    if node.bits_per_value == 1:
        bools = flat.unpack_bools(node.data, node.num_values)
        buffers.append(fsl.encode_validity_chunks(bools, item_counts))
    else:
        buffers.append((flat.encode(node), item_counts * node.bits_per_value // 8))
    enc = flat_enc(node.bits_per_value)
    for layer in reversed(layers):
        enc = pb.CompressiveEncoding(
            fixed_size_list=pb.FixedSizeList(
                items_per_value=layer.dimension,
                has_validity=layer.validity is not None,
                values=enc,
            )
        )
    return Chunked(enc, counts, buffers)


def _packed_chunks(block: StructBlock) -> Chunked:
    children = []
    for c in block.children:
        if not isinstance(c, FixedWidthBlock) or c.bits_per_value % 8:
            raise UnsupportedError("a packed struct in a mini-block needs byte-wide fixed children")
        children.append(c)
    rows = packed.pack_fixed(children)
    inner = _flat_chunks(rows)
    enc = pb.CompressiveEncoding(
        packed_struct=pb.PackedStruct(
            bits_per_value=[c.bits_per_value for c in children], values=inner.encoding
        )
    )
    return Chunked(enc, inner.counts, inner.buffers)


# -- FSST tables across pages ----------------------------------------------------------------

FSST_RETRAIN_SLACK = 1.10  # a reused table that compresses 10% worse than expected: retrain


class FsstReuse:
    """The FSST symbol table a string column carries from page to page within one file.

    Training costs about half as much as compressing a page, and a column's pages are
    usually alike, so the first page that needs a table trains one and later pages reuse
    it (every page stores its table, so any table is valid).  Before compressing, a page
    checks the table on a sample of its own strings (:func:`fsst.estimate`); when that
    is more than :data:`FSST_RETRAIN_SLACK` times the ratio the table achieved on its
    training page's sample, the page trains its own table and keeps the better of the
    two (by their sample ratios), for that page only.

    A writer encodes several pages of a column at once on the pool, so the table a page
    gets must not depend on timing: each encoding job of a column has its own
    ``FsstReuse`` chained to the previous job's.  A job uses the table its predecessor
    ended with, waiting for it if need be (the predecessor was submitted earlier to the
    FIFO pool, so it is already running and never waits on a later job), or trains one.
    :meth:`close` ends a job (also a cancelled one): its successor then inherits what it
    inherited.
    """

    def __init__(self, previous: FsstReuse | None = None):
        self._previous = previous
        self._result: Future = Future()  # (table, expected ratio) | None
        self._lock = threading.Lock()

    def table(self) -> tuple[bytes, float] | None:
        """The table and its expected compressed/raw ratio, or None: train one and
        :meth:`publish` it."""
        if self._result.done():
            return self._result.result()
        previous = self._previous
        inherited = previous._result.result() if previous is not None else None
        if inherited is not None:
            self._settle(inherited)
        return inherited

    def publish(self, table: bytes, ratio: float) -> None:
        self._settle((table, ratio))

    def close(self) -> None:
        """The job is over: settle with what the previous job ends with, when it does."""
        previous = self._previous
        if previous is None:
            self._settle(None)
        else:
            previous._result.add_done_callback(lambda f: self._settle(f.result()))

    def _settle(self, value: tuple[bytes, float] | None) -> None:
        with self._lock:
            if not self._result.done():
                self._result.set_result(value)
                self._previous = None  # the chain behind a settled job can go


def _fsst_compress(
    block: VariableWidthBlock, reuse: FsstReuse | None
) -> tuple[bytes, VariableWidthBlock]:
    """A symbol table for ``block`` and its compressed strings."""
    known = reuse.table() if reuse is not None else None
    if known is None:
        table, ratio = fsst.train_estimated(block)
        if reuse is not None:
            reuse.publish(table, ratio)
        return table, fsst.compress(block, table)
    table, expected = known
    seen = fsst.estimate(block, table)
    if seen > expected * FSST_RETRAIN_SLACK:
        own, own_ratio = fsst.train_estimated(block)
        if own_ratio < seen:
            table = own
    return table, fsst.compress(block, table)


def _fsst_candidate(block: VariableWidthBlock) -> bool:
    """Whether FSST is tried on a page of strings: enough bytes, and values long enough
    (the longest is only measured for a page big enough)."""
    total = int(block.offsets[-1] - block.offsets[0])
    return total >= FSST_MIN_PAGE_BYTES and block.longest() >= FSST_MIN_MAX_LENGTH


def _string_chunks(
    block: VariableWidthBlock, opts: ColumnOptions, fsst_reuse: FsstReuse | None
) -> Chunked:
    if opts.compression is not None:
        return _general_wrap(_variable_chunks(block), opts.compression, opts.compression_level)
    if _fsst_candidate(block):
        table, packed_block = _fsst_compress(block, fsst_reuse)
        if len(packed_block.data) < int(block.offsets[-1] - block.offsets[0]):
            inner = _variable_chunks(packed_block)
            enc = pb.CompressiveEncoding(
                fsst=pb.Fsst(symbol_table=bytes(table), values=inner.encoding)
            )
            return Chunked(enc, inner.counts, inner.buffers)
    return _variable_chunks(block)


def compress_miniblock(
    block: Block,
    opts: ColumnOptions,
    *,
    integer: bool = False,
    fsst_reuse: FsstReuse | None = None,
    stats: tuple[np.ndarray, int, int] | None = None,
) -> Chunked:
    """Encode a page's (non-dictionary) values as mini-block chunks.  ``fsst_reuse``
    carries a string column's FSST table between pages (None: train for this page).
    ``stats``: fixed-width values' unsigned view, bit-width sum and runs, when the caller
    has them (:mod:`.page_facts`)."""
    if isinstance(block, FixedWidthBlock):
        return _fixed_chunks(block, opts, integer=integer, stats=stats)
    if isinstance(block, VariableWidthBlock):
        return _string_chunks(block, opts, fsst_reuse)
    if isinstance(block, FixedSizeListBlock):
        return _fsl_chunks(block)
    if isinstance(block, StructBlock):
        return _packed_chunks(block)
    raise UnsupportedError(f"cannot mini-block encode {type(block).__name__}")


# -- block context ---------------------------------------------------------------------------


def compress_block(
    block: Block, scheme: str | None = None, level: int | None = None, *, integer: bool = False
) -> tuple[pb.CompressiveEncoding, np.ndarray]:
    """One whole buffer (dictionary items): Flat / Variable / InlineBitpacking, then an
    optional General wrapper when it shrinks the buffer."""
    if isinstance(block, VariableWidthBlock):
        enc, data = variable_enc(block.bits_per_offset), variable.encode_block(block)
    elif isinstance(block, FixedWidthBlock):
        enc, data = flat_enc(block.bits_per_value), flat.encode(block)
        # pylance 14 decodes block-context bitpacking of one 1024-value chunk only
        small = block.num_values <= bitpacking.BLOCK
        u = unsigned_view(block) if integer and small else None
        if u is not None and bitpacked_size(u, block.bits_per_value) < len(data):
            data = bitpacking.encode_inline_block(u, block.bits_per_value)
            enc = inline_bitpacking_enc(block.bits_per_value)
            scheme = None  # bitpacked items are already small; pylance leaves them raw
    else:
        raise UnsupportedError(f"cannot block encode {type(block).__name__}")
    if scheme is not None and len(data):
        packed_data = np.frombuffer(general.compress_buffer(data, scheme, level), dtype=np.uint8)
        if len(packed_data) < len(data):
            return general_enc(scheme, enc), packed_data
    return enc, np.asarray(data, dtype=np.uint8)


# -- per value (full-zip) --------------------------------------------------------------------


def compress_per_value(
    block: Block, opts: ColumnOptions, *, fsst_reuse: FsstReuse | None = None
) -> tuple[pb.CompressiveEncoding, FixedWidthBlock | VariableWidthBlock]:
    """Full-zip values: each value stays independently decodable (docs/format/structural.md)."""
    if isinstance(block, FixedWidthBlock):
        if block.bits_per_value % 8:
            raise UnsupportedError("full-zip needs byte-wide fixed-width values")
        return flat_enc(block.bits_per_value), block
    if isinstance(block, FixedSizeListBlock):
        rows = fsl.zip_rows(block)
        enc = _fsl_enc(block)
        return enc, rows
    if isinstance(block, VariableWidthBlock):
        bits = block.bits_per_offset
        if opts.compression is not None:
            values = general.compress_values(block, opts.compression, opts.compression_level)
            return general_enc(opts.compression, variable_enc(bits), opts.compression_level or 0), (
                values
            )
        if _fsst_candidate(block):
            table, out = _fsst_compress(block, fsst_reuse)
            if int(out.offsets[-1]) < int(block.offsets[-1] - block.offsets[0]):
                enc = pb.CompressiveEncoding(
                    fsst=pb.Fsst(symbol_table=bytes(table), values=variable_enc(bits))
                )
                return enc, out
        return variable_enc(bits), block
    if isinstance(block, StructBlock):
        return _variable_packed(block)
    raise UnsupportedError(f"cannot full-zip encode {type(block).__name__}")


def _fsl_enc(block: FixedSizeListBlock) -> pb.CompressiveEncoding:
    if isinstance(block.child, FixedSizeListBlock):
        inner = _fsl_enc(block.child)
    else:
        assert isinstance(block.child, FixedWidthBlock)  # FSL items are fixed width
        inner = flat_enc(block.child.bits_per_value)
    return pb.CompressiveEncoding(
        fixed_size_list=pb.FixedSizeList(
            items_per_value=block.dimension,
            has_validity=block.validity is not None,
            values=inner,
        )
    )


def _variable_packed(block: StructBlock) -> tuple[pb.CompressiveEncoding, VariableWidthBlock]:
    rows, fields = packed.pack_variable(block.children)
    msg = pb.VariablePackedStruct()
    for child, f in zip(block.children, fields, strict=True):
        fe = msg.fields.add()
        if f.variable:
            assert isinstance(child, VariableWidthBlock)
            fe.value.CopyFrom(variable_enc(child.bits_per_offset))
            fe.bits_per_length = f.bits
        else:
            fe.value.CopyFrom(flat_enc(f.bits))
            fe.bits_per_value = f.bits
    return pb.CompressiveEncoding(variable_packed_struct=msg), rows


# -- rep/def levels --------------------------------------------------------------------------

TINY_LEVELS = 256  # below this many levels in a page, raw u16 (like pylance's tiny pages)


def compress_levels(
    levels: np.ndarray, chunk_levels: np.ndarray, version: LanceFileVersion
) -> tuple[pb.CompressiveEncoding, np.ndarray, np.ndarray]:
    """Encode the levels of each chunk (``chunk_levels[i]`` levels each) with one encoding.

    Returns (encoding, bytes, size per chunk).  OutOfLineBitpacking to the bit length of the
    maximum level, raw u16 for tiny pages, and in 2.2 block RLE when runs are long.
    """
    levels = np.asarray(levels, dtype=np.uint16)
    n = len(levels)
    chunk_levels = np.asarray(chunk_levels, dtype=np.int64)
    width = int(levels.max()).bit_length() if n else 0
    if n < TINY_LEVELS or width == 0:
        return flat_enc(16), levels.view(np.uint8), chunk_levels * 2
    if version >= LanceFileVersion.V2_2:
        # block RLE when it beats bitpacking (long runs of the same level)
        block = FixedWidthBlock(levels.view(np.uint8), 16, n)
        runs = run_count(block)
        if runs * 3 + 8 * len(chunk_levels) < n * width // 8:
            data, sizes = rle.encode_blocks(block, chunk_levels)
            return rle_enc(16), data, sizes
    data, sizes = bitpacking.encode_out_of_line_chunks(levels, chunk_levels, width, 16)
    enc = pb.CompressiveEncoding(
        out_of_line_bitpacking=pb.OutOfLineBitpacking(
            uncompressed_bits_per_value=16, values=flat_enc(width)
        )
    )
    return enc, data, sizes


__all__ = [
    "Chunked",
    "ColumnOptions",
    "FsstReuse",
    "compress_block",
    "compress_levels",
    "compress_miniblock",
    "compress_per_value",
]
