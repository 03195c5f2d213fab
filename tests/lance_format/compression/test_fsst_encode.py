"""The FSST encoder (``fsst.train`` / ``fsst.compress``).

Truth comes from elsewhere: a slow pure-Python greedy longest-match encoder written here,
our decoder (itself tested against pylance's files), and pylance: its compressed bytes for
the same strings, and its reader, which must decode a file carrying our table and codes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import lance
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lance_format.compression import fsst, variable
from lance_format.compression.blocks import VariableWidthBlock
from lance_format.errors import InvalidArgumentError
from lance_format.reader import LanceFileReader
from lance_format.writer import LanceFileWriter

# -- helpers ---------------------------------------------------------------------------------


def block_of(strings: list[bytes], bits: int = 32) -> VariableWidthBlock:
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in strings], out=offsets[1:])
    data = np.frombuffer(b"".join(strings), dtype=np.uint8)
    return VariableWidthBlock(offsets, data, bits)


def strings_of(block: VariableWidthBlock) -> list[bytes]:
    o = np.asarray(block.offsets)
    return [block.data[a:b].tobytes() for a, b in zip(o[:-1], o[1:], strict=True)]


def symbols_of(table: bytes) -> list[bytes]:
    st_ = fsst.parse_symbol_table(table)
    return [st_.symbols[i, : st_.lengths[i]].tobytes() for i in range(st_.n_symbols)]


def make_table(symbols: list[bytes]) -> bytes:
    """A table written by hand from the format description (docs/format/compression.md)."""
    n = len(symbols)
    out = bytearray(fsst.SYMBOL_TABLE_SIZE)
    out[:8] = ((0x46535354 << 32) | (1 << 24) | n).to_bytes(8, "little")
    for i, s in enumerate(symbols):
        out[8 + 8 * i : 8 + 8 * i + len(s)] = s
        out[8 + 8 * n + i] = len(s)
    return bytes(out)


def ref_encode(s: bytes, symbols: list[bytes]) -> bytes:
    """Greedy: at each position the longest symbol that matches (the lowest code among
    equal symbols); a byte no symbol covers becomes ``255, byte``."""
    by_len: dict[int, dict[bytes, int]] = {}
    for code, sym in enumerate(symbols):
        by_len.setdefault(len(sym), {}).setdefault(sym, code)
    out = bytearray()
    i = 0
    while i < len(s):
        for length in range(min(8, len(s) - i), 0, -1):
            code = by_len.get(length, {}).get(s[i : i + length])
            if code is not None:
                out.append(code)
                i += length
                break
        else:
            out += bytes([255, s[i]])
            i += 1
    return bytes(out)


def check_against_reference(strings: list[bytes], table: bytes) -> VariableWidthBlock:
    """compress == the reference, per string, and decompress gives the strings back."""
    out = fsst.compress(block_of(strings), table)
    assert out.offsets[0] == 0 and len(out.offsets) == len(strings) + 1
    symbols = symbols_of(table)
    assert strings_of(out) == [ref_encode(s, symbols) for s in strings]
    assert strings_of(fsst.decompress(out, table)) == strings
    return out


WORDS = {
    "noun": "foxes ideas theodolites pinto beans instructions dependencies excuses platelets "
    "asymptotes courts dolphins multipliers warthogs frets dinos attainments somas patterns "
    "forges braids frays warhorses dugouts epitaphs pearls tithes waters orbits gifts sheaves "
    "depths sentiments decoys realms pains grouches escapades accounts deposits packages "
    "requests",
    "verb": "sleep wake are cajole haggle nag use boost affix detect integrate maintain nod "
    "was lose sublate solve thrash promise engage hinder print x-ray breach eat grow impress "
    "mold poach serve run dazzle snooze doze unwind kindle play hang believe doubt",
    "adj": "furious sly careful blithe quick fluffy slow quiet ruthless thin close dogged "
    "daring brave stealthy permanent enticing idle busy regular final ironic even bold silent",
    "adv": "sometimes always never furiously slyly carefully blithely quickly fluffily slowly "
    "quietly ruthlessly thinly closely doggedly daringly bravely stealthily permanently "
    "enticingly idly busily regularly finally ironically evenly boldly silently",
    "prep": "about above across after against along among around at atop before behind "
    "beneath beside besides between beyond by despite during except for from inside into "
    "near of on outside over past since through throughout to toward under until up upon "
    "without with within",
}


def comment_corpus(n: int, seed: int = 7) -> list[bytes]:
    """Strings like TPC-H comments: 10..43-byte slices of text from the TPC-H grammar."""
    rng = np.random.default_rng(seed)
    words = {k: v.split() for k, v in WORDS.items()}

    def pick(kind: str) -> str:
        return words[kind][rng.integers(len(words[kind]))]

    sentences = []
    for _ in range(max(n // 3, 50)):
        parts = [pick("adj"), pick("noun"), pick("verb"), pick("adv")]
        if rng.random() < 0.6:
            parts += [pick("prep"), "the", pick("adj"), pick("noun")]
        sentences.append(" ".join(parts) + rng.choice([". ", "; ", "! ", " -- ", ": "]))
    text = "".join(sentences).encode()
    starts = rng.integers(0, len(text) - 50, n)
    lengths = rng.integers(10, 44, n)
    return [text[s : s + k] for s, k in zip(starts, lengths, strict=True)]


# -- round trips and the parse rule ----------------------------------------------------------

BYTE_STRINGS = st.one_of(
    st.binary(max_size=24),
    st.lists(
        st.sampled_from([b"a", b"b", b"ab", b"the ", b" ", b"\xff", b"\xff\xff", b"\x00"]),
        max_size=16,
    ).map(b"".join),
    st.text(max_size=20).map(lambda t: t.encode("utf-8")),  # non-ASCII
    st.text(alphabet="abcde \u00e9", min_size=9, max_size=150).map(lambda t: t.encode()),
)


@settings(max_examples=40, deadline=None)
@given(
    strings=st.lists(BYTE_STRINGS, max_size=40),
    sample_bytes=st.sampled_from([64, 1 << 16]),
)
@example(strings=[], sample_bytes=1 << 16)
@example(strings=[b""], sample_bytes=1 << 16)
@example(strings=[b""] * 9, sample_bytes=1 << 16)
@example(strings=[b"\xff" * 40], sample_bytes=1 << 16)
@example(strings=[b"one single string, longer than eight bytes"], sample_bytes=64)
@example(strings=[b"abcabcabc" * 50, b"", b"x"], sample_bytes=64)
def test_train_compress_round_trip_and_match_reference(strings, sample_bytes):
    table = fsst.train(block_of(strings), sample_bytes=sample_bytes)
    st_ = fsst.parse_symbol_table(table)
    assert st_.enabled and st_.n_symbols <= 255
    assert ((st_.lengths[: st_.n_symbols] >= 1) & (st_.lengths[: st_.n_symbols] <= 8)).all()
    check_against_reference(strings, table)


SYMBOL_ALPHABET = [b"a", b"b", b"\xff", b"\x00"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    symbols=st.lists(
        st.lists(st.sampled_from(SYMBOL_ALPHABET), min_size=1, max_size=8).map(b"".join),
        max_size=255,
    ),
    strings=st.lists(
        st.lists(st.sampled_from(SYMBOL_ALPHABET), max_size=40).map(b"".join), max_size=30
    ),
)
def test_compress_is_greedy_longest_match_for_any_table(symbols, strings):
    """Hand-written tables: duplicates (lowest code), 0xFF inside symbols, prefixes that are
    not symbols themselves, matches that would run into the next string."""
    check_against_reference(strings, make_table(symbols))


def test_longest_match_skips_a_missing_middle_and_stops_at_string_ends():
    # "abcd" is a symbol, "abc" is not: at "abce" the parse must fall back to "ab"
    symbols = [b"ab", b"abcd", b"c", b"e", b"d", b"abcdefgh", b"b"]
    strings = [b"abce", b"abcd", b"abc", b"dab", b"abcdefg", b"habcdefgh", b"abcdefghab"]
    out = check_against_reference(strings, make_table(symbols))
    assert strings_of(out)[:3] == [bytes([0, 2, 3]), bytes([1]), bytes([0, 2])]


@pytest.mark.parametrize(
    "shape",
    ["many short", "few long", "mixed"],
)
def test_parse_of_many_short_few_long_and_mixed_strings(shape):
    """Tables trained on corpora of different shapes still encode like the reference."""
    rng = np.random.default_rng(3)
    corpus = comment_corpus(3000)
    if shape == "many short":
        strings = corpus  # ~80 KB
    elif shape == "few long":
        strings = [b"".join(corpus[i : i + 300]) for i in range(0, 3000, 300)]
    else:
        strings = corpus[:2000] + [b"".join(corpus[2000:])] + [b""] * 3
        rng.shuffle(strings)
    table = fsst.train(block_of(strings))
    check_against_reference(strings, table)


def test_offsets_not_starting_at_zero_and_large_offsets_kept():
    strings = comment_corpus(200)
    full = block_of([b"prefix"] + strings, bits=64)
    block = VariableWidthBlock(full.offsets[1:], full.data, 64)
    table = fsst.train(block)
    out = fsst.compress(block, table)
    assert out.bits_per_offset == 64 and out.offsets[0] == 0
    assert strings_of(fsst.decompress(out, table)) == strings
    assert strings_of(out) == strings_of(fsst.compress(block_of(strings), table))


def test_raw_table_leaves_strings_alone_and_bad_offsets_are_refused():
    strings = [b"abc", b"", b"\xffz"]
    out = fsst.compress(block_of(strings), fsst.raw_symbol_table())
    assert strings_of(out) == strings
    with pytest.raises(InvalidArgumentError):
        fsst.compress(VariableWidthBlock(np.array([0, 9]), np.zeros(3, np.uint8)), make_table([]))
    with pytest.raises(InvalidArgumentError):
        fsst.train(VariableWidthBlock(np.array([0, 2, 1]), np.zeros(3, np.uint8)))


# -- the table -------------------------------------------------------------------------------


def test_training_counts_match_a_walk_of_the_codes():
    """The compiled count of a training round (codes, and pairs within a string) equals a
    plain walk over the compressed strings, escapes and literal 0xFF bytes included."""
    rng = np.random.default_rng(5)
    words = [b"ab", b"abc", b"\xff", b"\xff\xff", b"zz", b"q", b"\x00"]
    strings = [b"".join(rng.choice(words, rng.integers(0, 6))) for _ in range(400)]
    block = block_of(strings)
    table = fsst.parse_symbol_table(fsst.train(block))
    packed = fsst.compress(block, table)
    n = table.n_symbols
    lens = np.zeros(512, dtype=np.int64)
    lens[:n] = table.lengths[:n]
    lens[256:] = 1
    first = np.zeros(256, dtype=np.int64)
    first[:n] = table.symbols[:n, 0]
    count1 = np.zeros(512, dtype=np.int64)
    count2 = np.zeros(512 * 512, dtype=np.int32)
    touched = np.empty(2 * len(packed.data), dtype=np.int64)
    seen = fsst._count_codes(packed.data, packed.offsets, first, lens, count1, count2, touched)

    want1, want2 = np.zeros(512, dtype=np.int64), {}
    data, o = packed.data.tolist(), packed.offsets.tolist()
    for s in range(len(o) - 1):
        i, prev = o[s], None
        while i < o[s + 1]:
            if data[i] == 255:
                code, byte, i = 256 + data[i + 1], data[i + 1], i + 2
            else:
                code, byte, i = data[i], int(first[data[i]]), i + 1
            want1[code] += 1
            if prev is not None:
                if lens[prev] != 1:
                    want1[256 + byte] += 1
                want2[prev * 512 + code] = want2.get(prev * 512 + code, 0) + 1
                if lens[code] > 1:
                    key = prev * 512 + 256 + byte
                    want2[key] = want2.get(key, 0) + 1
            prev = code
    assert count1.tolist() == want1.tolist()
    assert sorted(touched[:seen].tolist()) == sorted(want2)
    assert {k: int(count2[k]) for k in want2} == want2


def test_table_layout_and_header():
    strings = comment_corpus(1000)  # ~27 KB: the sample is the whole input
    data = np.frombuffer(b"".join(strings), np.uint8)
    table = fsst.train(block_of(strings))
    assert table == fsst.train(block_of(strings))  # deterministic
    assert len(table) == fsst.SYMBOL_TABLE_SIZE
    header = int.from_bytes(table[:8], "little")
    assert header >> 32 == 0x46535354 and table[4:8] == b"TSSF"
    assert (header >> 24) & 0xFF == 1  # encoder switch on
    n = header & 0xFF
    symbols = symbols_of(table)
    assert 0 < n == len(symbols) <= 255 and len(set(symbols)) == n
    # upstream's terminator: the first of the rarest bytes of the sample
    assert (header >> 8) & 0xFF == int(np.argmin(np.bincount(data, minlength=256)))
    # upstream's order: 2-byte symbols that start a longer one (suffix_lim of them), the
    # other 2-byte symbols, then 3..8 bytes, then single bytes
    lens = [len(s) for s in symbols]
    rank = [7 if k == 1 else k - 2 for k in lens]
    assert rank == sorted(rank)
    suffix_lim = (header >> 16) & 0xFF
    longer = {s[:2] for s in symbols if len(s) > 2}
    assert [s in longer for s in symbols if len(s) == 2] == [True] * suffix_lim + [False] * (
        lens.count(2) - suffix_lim
    )
    # padding: symbols zero-filled to 8 bytes, nothing after the lengths
    raw = np.frombuffer(table, np.uint8)
    for i, s in enumerate(symbols):
        assert raw[8 + 8 * i + len(s) : 16 + 8 * i].sum() == 0
    assert raw[8 + 9 * n :].sum() == 0


def test_empty_inputs_give_a_usable_table():
    for strings in ([], [b""], [b""] * 4):
        table = fsst.train(block_of(strings))
        assert fsst.parse_symbol_table(table).n_symbols == 0
        out = fsst.compress(block_of(strings), table)
        assert len(out.data) == 0 and list(out.offsets) == [0] * (len(strings) + 1)


def test_synthetic_comments_shrink():
    strings = comment_corpus(6000)
    raw = sum(map(len, strings))
    out = check_against_reference(strings, fsst.train(block_of(strings)))
    assert raw / len(out.data) > 2.0  # about 3 for this text


# -- against pylance -------------------------------------------------------------------------


def _tpchgen() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "tpchgen-cli")
    return exe if os.path.exists(exe) else (shutil.which("tpchgen-cli") or "tpchgen-cli")


@pytest.fixture(scope="module")
def pylance_comments(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """TPC-H ``l_comment`` (tpchgen, scale 0.001), written by pylance with FSST, and what
    our reader saw of it: the compressed strings, the raw table, the mini-block chunks."""
    root = tmp_path_factory.mktemp("fsst_tpch")
    subprocess.run(
        [_tpchgen(), "parquet", "-s", "0.001", "--tables=lineitem", f"--output-dir={root}"],
        check=True,
        capture_output=True,
    )
    column = pq.read_table(root / "lineitem.parquet", columns=["l_comment"]).column(0)
    table = pa.table({"s": column.cast(pa.string())})
    path = str(root / "comments.lance")
    with lance.file.LanceFileWriter(path, table.schema, version="2.2") as w:
        w.write_batch(table)
    seen: dict = {"tables": [], "compressed": [], "chunks": []}
    parse, decompress_chunks = fsst.parse_symbol_table, fsst.decompress_chunks

    def spy_parse(raw):
        seen["tables"].append(bytes(raw))
        return parse(raw)

    def spy_chunks(chunks, counts, bits, st_):
        # the reader decodes FSST straight from the chunks; the compressed strings are
        # what the Variable decoder alone makes of them
        seen["chunks"].append((chunks, np.asarray(counts), bits))
        seen["compressed"].append(variable.decode_chunks(chunks, counts, bits))
        return decompress_chunks(chunks, counts, bits, st_)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fsst, "parse_symbol_table", spy_parse)
        mp.setattr(fsst, "decompress_chunks", spy_chunks)
        with LanceFileReader(path) as reader:
            back = reader.read()
    assert back.column(0).equals(table.column(0))
    # the one-pass decode of the chunks is the two-step one
    assert strings_of(fsst.decompress(seen["compressed"][0], seen["tables"][0])) == [
        s.encode() for s in table.column(0).to_pylist()
    ]
    assert len(seen["compressed"]) == 1 == len(set(seen["tables"])), "expected one FSST page"
    strings = [s.encode() for s in table.column(0).to_pylist()]
    return {"path": path, "strings": strings, "table": seen["tables"][0], **seen}


def test_compression_ratio_against_pylance(pylance_comments):
    strings = pylance_comments["strings"]
    table = fsst.train(block_of(strings))
    ours = fsst.compress(block_of(strings), table)
    theirs = pylance_comments["compressed"][0]
    theirs_bytes = int(theirs.offsets[-1] - theirs.offsets[0])
    raw = sum(map(len, strings))
    assert raw / len(ours.data) > 1.5
    assert len(ours.data) <= 1.10 * theirs_bytes, (len(ours.data), theirs_bytes)
    assert strings_of(fsst.decompress(ours, table)) == strings


def _canonical_codes(stream: bytes, symbols: list[bytes]) -> list:
    """The code sequence with each code replaced by its symbol's bytes."""
    out, i = [], 0
    while i < len(stream):
        if stream[i] == 255:
            out.append(("escape", stream[i + 1]))
            i += 2
        else:
            out.append(symbols[stream[i]])
            i += 1
    return out


def test_same_parse_as_pylance_with_its_table(pylance_comments):
    """Upstream's encoder takes the longest match too; its tables hold duplicate symbols,
    and where it picks another code for the same bytes, only the code number differs."""
    table = pylance_comments["table"]
    theirs = pylance_comments["compressed"][0]
    strings = pylance_comments["strings"]
    ours = fsst.compress(block_of(strings), table)
    o = np.asarray(theirs.offsets)
    assert np.array_equal(ours.offsets, o - o[0])
    symbols = symbols_of(table)
    theirs_strings = strings_of(VariableWidthBlock(o - o[0], theirs.data[o[0] :]))
    for a, b in zip(strings_of(ours), theirs_strings, strict=True):
        assert _canonical_codes(a, symbols) == _canonical_codes(b, symbols)


def test_pylance_reads_our_table_and_codes(pylance_comments, tmp_path):
    """Swap pylance's table and codes in its file for ours (our layout and header, the same
    symbols so every string keeps its compressed length); pylance must still read it."""
    strings = pylance_comments["strings"]
    symbols = symbols_of(pylance_comments["table"])
    ours_table = fsst._export(
        fsst._symbol_values(
            np.frombuffer(b"".join(s.ljust(8, b"\0") for s in symbols), np.uint8).reshape(-1, 8),
            np.array([len(s) for s in symbols]),
        ),
        np.array([len(s) for s in symbols]),
        terminator=7,
    )
    assert ours_table != pylance_comments["table"]
    ours = fsst.compress(block_of(strings), ours_table)
    theirs = pylance_comments["compressed"][0]
    assert not np.array_equal(ours.data, theirs.data[theirs.offsets[0] : theirs.offsets[-1]])

    raw = bytearray(open(pylance_comments["path"], "rb").read())
    at = raw.find(pylance_comments["table"])
    assert at >= 0 and raw.find(pylance_comments["table"], at + 1) < 0
    raw[at : at + len(ours_table)] = ours_table
    first = 0
    for chunks, counts, bits in pylance_comments["chunks"]:
        base = chunks.base.tobytes()
        page = raw.find(base)
        assert page >= 0 and bits == 32
        for start, k in zip(chunks.starts.tolist(), counts.tolist(), strict=True):
            offs = np.frombuffer(base, "<u4", count=k + 1, offset=start)
            lo, hi = page + start + int(offs[0]), page + start + int(offs[-1])
            new = ours.data[ours.offsets[first] : ours.offsets[first + k]].tobytes()
            assert len(new) == hi - lo
            raw[lo:hi] = new
            first += k
    assert first == len(strings)
    path = tmp_path / "ours.lance"
    path.write_bytes(bytes(raw))
    back = lance.file.LanceFileReader(str(path)).read_all().to_table()
    assert [s.encode() for s in back.column(0).to_pylist()] == strings


# -- one table across the pages of a file ----------------------------------------------------


def _fsst_tables(path: str) -> list[bytes | None]:
    """The FSST symbol table of every page of column 0 (None: not an FSST page)."""
    out = []
    with LanceFileReader(path) as reader:
        for page in reader.metadata.columns[0].pages:
            layout = page.encoding.WhichOneof("layout")
            enc = getattr(page.encoding, layout).value_compression
            out.append(enc.fsst.symbol_table if enc.WhichOneof("compression") == "fsst" else None)
    return out


def _write_pages(path: str, strings: list[str], page_bytes: int, batch_rows: int) -> None:
    table = pa.table({"s": pa.array(strings, pa.string())})
    with LanceFileWriter(path, table.schema, max_page_bytes=page_bytes) as w:
        for batch in table.to_batches(batch_rows):
            w.write_batch(batch)


def test_later_pages_reuse_the_first_table_and_pylance_reads_them(tmp_path):
    """Alike pages share the table trained on the first one (several pages per encoding
    job, and one page per job, chained across jobs); pylance reads every page back."""
    strings = [s.decode() for s in comment_corpus(24_000)]
    for batch_rows in (24_000, 3_000):  # one job of many pages / many jobs
        path = str(tmp_path / f"reuse{batch_rows}.lance")
        _write_pages(path, strings, 128 << 10, batch_rows)
        tables = _fsst_tables(path)
        assert len(tables) >= 4 and None not in tables
        assert len(set(tables)) == 1, "alike pages should share one table"
        back = lance.file.LanceFileReader(path).read_all().to_table()
        assert back.column(0).to_pylist() == strings


def test_a_page_unlike_the_first_trains_its_own_table(tmp_path):
    """Text pages, then pages of hex digests: the digests get a table of their own (the
    text table would leave them almost uncompressed); both read back through pylance."""
    text = [s.decode() for s in comment_corpus(8_000)]
    rng = np.random.default_rng(3)
    digests = [bytes(rng.integers(0, 256, 16, dtype=np.uint8)).hex() for _ in range(8_000)]
    path = str(tmp_path / "drift.lance")
    _write_pages(path, text + digests, 192 << 10, 2_000)
    tables = _fsst_tables(path)
    assert None not in tables and len(tables) >= 4
    assert tables[0] == tables[1] and tables[-1] != tables[0]
    digest_symbols = symbols_of(tables[-1])
    assert all(set(s) <= set(b"0123456789abcdef") for s in digest_symbols)
    back = lance.file.LanceFileReader(path).read_all().to_table()
    assert back.column(0).to_pylist() == text + digests


def test_reused_tables_do_not_depend_on_timing(tmp_path):
    """The pages are encoded on a thread pool, several at once: the bytes written are
    still the same from run to run."""
    strings = [s.decode() for s in comment_corpus(16_000, seed=11)]
    files = []
    for i in range(3):
        path = tmp_path / f"run{i}.lance"
        _write_pages(str(path), strings, 96 << 10, 1_000)
        files.append(path.read_bytes())
    assert files[0] == files[1] == files[2]


def test_estimate_judges_on_the_training_held_out_sample():
    """``train_estimated``'s ratio is that of its own table on the held-out sample, which
    is what ``estimate`` measures; on other strings the same table does worse."""
    strings = comment_corpus(6_000)
    table, ratio = fsst.train_estimated(block_of(strings))
    assert table == fsst.train(block_of(strings))
    assert fsst.estimate(block_of(strings), table) == pytest.approx(ratio)
    rng = np.random.default_rng(5)
    other = [bytes(rng.integers(0, 256, 30, dtype=np.uint8)) for _ in range(3_000)]
    assert fsst.estimate(block_of(other), table) > 1.5 * ratio


def test_full_zip_pages_reuse_the_table_too(tmp_path):
    """Values of 256 bytes and more are full-zipped, each compressed on its own with the
    page's table: those pages share one table as well, and pylance reads them."""
    pieces = comment_corpus(12_000, seed=5)
    strings = [b"".join(pieces[i : i + 30]).decode() for i in range(0, len(pieces), 30)]
    assert min(map(len, strings)) >= 256
    path = str(tmp_path / "fullzip.lance")
    _write_pages(path, strings, 64 << 10, 50)
    with LanceFileReader(path) as reader:
        layouts = {p.encoding.WhichOneof("layout") for p in reader.metadata.columns[0].pages}
    assert layouts == {"full_zip_layout"}
    tables = _fsst_tables(path)
    assert len(tables) >= 3 and None not in tables and len(set(tables)) == 1
    back = lance.file.LanceFileReader(path).read_all().to_table()
    assert back.column(0).to_pylist() == strings
