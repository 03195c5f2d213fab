"""Corrupt pylance files must either read or fail with a LanceError, nothing else.

Real 2.0/2.1/2.2 files are mutated (seeded): random byte flips, flips inside the metadata
tail, truncation at many points, splices from another file, footer fields, offset-table
entries and protobuf bytes set to hostile values.  Every case opens the file and reads it
(schema, full read, take, range).

The cases run in a child process so that a segfault, a hang or a runaway allocation is
caught: the child has an address-space limit (a huge allocation becomes MemoryError, which
counts as a failure), every case has an alarm, and the parent has an overall timeout and
knows which case was running if the child dies.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter

import fixtures as fx
import numpy as np
import pyarrow as pa
import pytest
from repo_paths import REPO, TESTS

HERE = os.path.dirname(os.path.abspath(__file__))  # the child imports this module from here
CASE_TIMEOUT_S = 20  # per case, in the child
CHILD_TIMEOUT_S = 600  # per child process
MEMORY_LIMIT = 3 << 30  # address space of the child

# --------------------------------------------------------------------------------------------
# Base files
# --------------------------------------------------------------------------------------------


def _base_table(version: str) -> pa.Table:
    n = 1500
    rng = fx.rng_for("corruption-base")
    cols = {
        "i32": fx.ints("int32", p_null=0.1)(n, rng),
        "seq": fx.sequence()(n, rng),
        "s": fx.var_strings(0, 12, p_null=0.1)(n, rng),
        "long_s": fx.var_strings(257, 400, p_null=0.1)(n, rng),
        "lst": fx.list_of(fx.ints("int32", lo=0, hi=50, p_null=0.1))(n, rng),
        "st": fx.struct_of(x=fx.ints("int16", p_null=0.2), y=fx.words(4))(n, rng),
        "vec": fx.fsl_of(fx.floats("float32"), 8, p_null=0.1)(n, rng),
        "dict": fx.words(3, p_null=0.1)(n, rng),
        "const": fx.constant(7, pa.int32())(n, rng),
        "nulls": fx.all_null(pa.int64())(n, rng),
    }
    return pa.table(cols)


def _write_bases(root: str) -> dict[str, str]:
    paths = {}
    for v in fx.VERSIONS:
        p = os.path.join(root, f"base_{v}.lance")
        fx.write_table(p, _base_table(v), v, 500, {"data_cache_bytes": 1, "max_page_bytes": 8192})
        paths[v] = p
    return paths


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, str]:
    return _write_bases(str(tmp_path_factory.mktemp("corruption")))


# --------------------------------------------------------------------------------------------
# Mutations (plain data, so the child can rebuild them)
# --------------------------------------------------------------------------------------------

U64_HOSTILE = [0, 1, 7, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**64 - 1]


def _cases(version: str, bases: dict[str, str]) -> list[dict]:
    path = bases[version]
    with open(path, "rb") as fh:
        data = fh.read()
    size = len(data)
    info = fx.inspect_container(path)
    cm_start, cmo, gbo, n_gb, n_col = info.footer
    gb0_pos, gb0_size = info.global_buffers[0]
    rng = fx.rng_for("corruption", version)
    other = bases[{"2.0": "2.2", "2.1": "2.0", "2.2": "2.1"}[version]]
    other_size = os.path.getsize(other)
    cases: list[dict] = []

    def add(kind: str, **params) -> None:
        cases.append({"id": f"{version}/{kind}/{len(cases)}", "kind": kind, **params})

    # Random flips anywhere (mostly data: must not crash even if values come out wrong).
    for _ in range(40):
        k = int(rng.integers(1, 9))
        add("flip", pos=rng.integers(0, size, k).tolist(), xor=rng.integers(1, 256, k).tolist())
    # Flips inside the metadata tail: FileDescriptor, ColumnMetadata, offset tables, footer.
    for _ in range(70):
        k = int(rng.integers(1, 4))
        add(
            "flip",
            pos=rng.integers(gb0_pos, size, k).tolist(),
            xor=rng.integers(1, 256, k).tolist(),
        )
    # Truncation: spread over the file, and densely over the tail.
    for cut in np.linspace(0, size - 1, 25).astype(int).tolist():
        add("truncate", length=cut)
    for cut in range(size - 1, size - 60, -1):
        add("truncate", length=cut)
    for cut in rng.integers(gb0_pos, size - 60, 10).tolist():
        add("truncate", length=int(cut))
    # Splices from another file (another version, same columns).
    for _ in range(15):
        ln = int(rng.integers(1, 4096))
        add(
            "splice",
            other=other,
            src=int(rng.integers(0, max(1, other_size - ln))),
            dst=int(rng.integers(0, max(1, size - ln))),
            length=ln,
        )
    for cut in rng.integers(64, size - 64, 5).tolist():
        add(
            "head_tail", other=other, cut=int(cut), other_cut=int(rng.integers(64, other_size - 64))
        )
    add("head_tail", other=other, cut=size - 40, other_cut=other_size - 40)  # foreign footer
    # Footer fields: cm_start, cmo_start, gbo_start (u64), n_gb, n_col (u32), major, minor.
    fpos = size - 40
    for off in (0, 8, 16):
        for val in U64_HOSTILE + [size - 40, size, gb0_pos, cm_start + 1]:
            add("set", pos=fpos + off, fmt="<Q", value=val)
    for off in (24, 28):
        for val in [0, 1, 2, 1000, 2**31, 2**32 - 1]:
            add("set", pos=fpos + off, fmt="<I", value=val)
    for off in (32, 34):
        for val in [0, 1, 2, 3, 0xFFFF]:
            add("set", pos=fpos + off, fmt="<H", value=val)
    # Offset tables: each column's (position, size), and global buffer 0.
    for c in range(n_col):
        entry = cmo + 16 * c
        for val in (0, size, size + 1, 2**63, int(rng.integers(0, size))):
            add("set", pos=entry, fmt="<Q", value=val)
        for val in (0, 1, size, 2**40, info.column_meta[c][1] - 1, info.column_meta[c][1] + 7):
            add("set", pos=entry + 8, fmt="<Q", value=val)
    for val in (0, size, 2**63, gb0_pos + 1):
        add("set", pos=gbo, fmt="<Q", value=val)
    for val in (0, 1, 2**40, gb0_size - 1, gb0_size + 1):
        add("set", pos=gbo + 8, fmt="<Q", value=val)
    # Protobuf bytes: flips, varint runaways (0x80/0xff runs) and zeroed spans in the
    # FileDescriptor and in each ColumnMetadata.
    regions = [(gb0_pos, gb0_size)] + list(info.column_meta)
    for pos, ln in regions:
        for _ in range(3):
            add("flip", pos=[int(rng.integers(pos, pos + ln))], xor=[int(rng.integers(1, 256))])
        for fill in (0x80, 0xFF, 0x00):
            start = int(rng.integers(pos, pos + max(1, ln - 12)))
            add("fill", pos=start, length=min(12, ln), byte=fill)
    # A page's buffer offsets pointing elsewhere: rewrite the first varint after a 0x0a tag
    # inside column metadata (buffer_offsets) with a huge value, when present.
    for pos, ln in info.column_meta[:4]:
        blob = data[pos : pos + ln]
        at = blob.find(b"\x12")
        if at >= 0:
            add("fill", pos=pos + at + 1, length=1, byte=0x7F)
    return cases


def _apply(case: dict, data: bytes) -> bytes:
    kind = case["kind"]
    if kind == "flip":
        buf = bytearray(data)
        for p, x in zip(case["pos"], case["xor"], strict=True):
            buf[p] ^= x
        return bytes(buf)
    if kind == "truncate":
        return data[: case["length"]]
    if kind in ("splice", "head_tail"):
        with open(case["other"], "rb") as fh:
            other = fh.read()
        if kind == "head_tail":
            return data[: case["cut"]] + other[case["other_cut"] :]
        buf = bytearray(data)
        src, dst, ln = case["src"], case["dst"], case["length"]
        buf[dst : dst + ln] = other[src : src + ln]
        return bytes(buf)
    if kind == "set":
        buf = bytearray(data)
        struct.pack_into(case["fmt"], buf, case["pos"], case["value"])
        return bytes(buf)
    if kind == "fill":
        buf = bytearray(data)
        buf[case["pos"] : case["pos"] + case["length"]] = bytes([case["byte"]]) * case["length"]
        return bytes(buf[: len(data)])
    raise ValueError(kind)


# --------------------------------------------------------------------------------------------
# Child process
# --------------------------------------------------------------------------------------------


class CaseTimeout(BaseException):  # noqa: N818 - a BaseException so the reader cannot swallow it
    pass


def _exercise(reader_cls, path: str) -> None:
    r = reader_cls(path)
    _ = r.schema
    n = r.num_rows
    _ = r.version
    r.read()
    if n:
        r.take([n - 1, 0])
        r.read_range(n // 2, min(n, n // 2 + 3))
        for _b in r.read_batches(batch_size=700):
            pass


def _child(spec_path: str) -> None:
    import resource
    import signal
    import traceback

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    sys.setrecursionlimit(3000)

    def on_alarm(signum, frame):
        raise CaseTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    from lance_format import LanceError, LanceFileReader

    with open(spec_path) as fh:
        spec = json.load(fh)
    with open(spec["base"], "rb") as fh:
        base = fh.read()
    out = sys.stdout
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "corrupt.lance")
        for case in spec["cases"]:
            print(f"START {case['id']}", file=sys.stderr, flush=True)
            with open(path, "wb") as fh:
                fh.write(_apply(case, base))
            t0 = time.perf_counter()
            signal.alarm(CASE_TIMEOUT_S)
            try:
                _exercise(LanceFileReader, path)
                outcome, detail = "ok", ""
            except CaseTimeout:
                outcome, detail = "bad", f"timeout after {CASE_TIMEOUT_S} s"
            except LanceError as exc:
                outcome, detail = "lance_error", type(exc).__name__
            except BaseException as exc:  # noqa: BLE001 - exactly what we are looking for
                tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
                outcome, detail = "bad", f"{type(exc).__name__}: {exc}\n{''.join(tb[-4:])}"
            finally:
                signal.alarm(0)
            rec = {"id": case["id"], "outcome": outcome, "detail": detail[:2000]}
            rec["seconds"] = round(time.perf_counter() - t0, 3)
            out.write(json.dumps(rec) + "\n")
            out.flush()


def _run_child(base: str, cases: list[dict], tmp: str) -> tuple[list[dict], str, int | None]:
    spec = os.path.join(tmp, "spec.json")
    with open(spec, "w") as fh:
        json.dump({"base": base, "cases": cases}, fh)
    code = (
        "import sys; sys.path[:0] = sys.argv[1:4];"
        "import test_corruption as t; t._child(sys.argv[4])"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, HERE, str(TESTS), str(REPO), spec],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
        )
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        rc = None
    results = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return results, stderr, rc


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", fx.VERSIONS)
def test_corrupt_files_raise_only_lance_errors(api, bases, version: str, tmp_path) -> None:
    # The unmutated file must read correctly, or every case fails at the same early point
    # and the fuzzing proves nothing.
    fx.assert_tables_equal(
        api.LanceFileReader(bases[version]).read(), fx.pylance_read(bases[version]), "base file"
    )
    cases = _cases(version, bases)
    results, stderr, rc = _run_child(bases[version], cases, str(tmp_path))
    done = {r["id"] for r in results}
    if len(done) < len(cases):
        started = [ln[6:] for ln in stderr.splitlines() if ln.startswith("START ")]
        last = started[-1] if started else "(none)"
        pytest.fail(
            f"child died (return code {rc}) during case {last} "
            f"after {len(done)}/{len(cases)} cases; stderr tail:\n{stderr[-3000:]}"
        )
    bad = [r for r in results if r["outcome"] == "bad"]
    outcomes = Counter(r["outcome"] for r in results)
    if bad:
        kinds = Counter(r["detail"].split(":")[0] for r in bad)
        examples = "\n\n".join(f"{r['id']}: {r['detail']}" for r in bad[:5])
        pytest.fail(f"{len(bad)} cases escaped as non-Lance errors {dict(kinds)}:\n{examples}")
    # The fuzzing reached the checks: hostile footers must have been refused.
    assert outcomes["lance_error"] > len(cases) // 4, outcomes


def _mutated(tmp_path, src: str, fn) -> str:
    with open(src, "rb") as fh:
        data = bytearray(fh.read())
    fn(data)
    out = str(tmp_path / "mutated.lance")
    with open(out, "wb") as fh:
        fh.write(bytes(data))
    return out


@pytest.mark.parametrize("version", fx.VERSIONS)
def test_bad_magic_is_corrupt_file_error(api, bases, version, tmp_path) -> None:
    def fn(d: bytearray) -> None:
        d[-4:] = b"LANX"

    with pytest.raises(api.errors.CorruptFileError):
        api.LanceFileReader(_mutated(tmp_path, bases[version], fn)).read()


@pytest.mark.parametrize("version", fx.VERSIONS)
def test_unknown_footer_version_is_unsupported(api, bases, version, tmp_path) -> None:
    def fn(d: bytearray) -> None:
        struct.pack_into("<HH", d, len(d) - 8, 9, 9)

    with pytest.raises(api.errors.UnsupportedError):
        api.LanceFileReader(_mutated(tmp_path, bases[version], fn)).read()


def test_legacy_v1_file_is_read(api, legacy_file) -> None:
    """A v1 file (footer 0.2) goes to the legacy reader (tests/lance_format/legacy/test_legacy.py checks its
    values against pylance); here: it opens as version 0.1 and reads its rows."""
    with open(legacy_file, "rb") as fh:
        tail = fh.read()[-16:]
    assert tail[-4:] == b"LANC" and struct.unpack("<HH", tail[8:12]) == (0, 2), tail
    reader = api.LanceFileReader(legacy_file)
    assert reader.version == "0.1"
    assert reader.read().num_rows == reader.num_rows > 0


def test_unstable_2_3_file_is_unsupported(api, tmp_path) -> None:
    """pylance can write 2.3 (unstable, PlanarLayout); we do not read it yet."""
    path = str(tmp_path / "v23.lance")
    fx.write_table(path, pa.table({"a": pa.array([1, 2], pa.int32())}), "2.3")
    with open(path, "rb") as fh:
        assert fh.read()[-8:] == b"\x02\x00\x03\x00LANC"
    with pytest.raises(api.errors.UnsupportedError):
        api.LanceFileReader(path).read()


@pytest.mark.parametrize(
    "content",
    [b"", b"LANC", b"\x00" * 39 + b"C", b"H" * 100 + b"LANC", b"\x00" * 36 + b"LANC"],
    ids=["empty", "magic_only", "zeros_39", "pad_magic", "zero_footer"],
)
def test_tiny_files_are_corrupt(api, tmp_path, content: bytes) -> None:
    path = str(tmp_path / "tiny.lance")
    with open(path, "wb") as fh:
        fh.write(content)
    with pytest.raises(api.LanceError):
        api.LanceFileReader(path).read()


def test_corruption_cases_are_valid_mutations(bases) -> None:
    """The case generator (no reader involved): every mutation changes the file."""
    for v in fx.VERSIONS:
        with open(bases[v], "rb") as fh:
            data = fh.read()
        cases = _cases(v, bases)
        assert len(cases) > 250
        changed = sum(_apply(c, data) != data for c in cases)
        assert changed >= len(cases) - 10, (v, changed, len(cases))
