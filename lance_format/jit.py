"""Compiled kernels for the hot loops numpy cannot express in one call.

Every kernel in the project is declared with :func:`kernel`: numba ``njit`` with ``nogil``
(so the reader's decode threads run kernels on every core) and ``cache`` (so a process loads
machine code from ``__pycache__`` instead of compiling).  Kernels are compiled lazily, but each
declares the signatures it is called with, and :func:`warm_up` compiles all of them: the server
calls it at start, so no user request pays for compilation.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

_REGISTRY: list[tuple[Any, tuple[str, ...]]] = []

_PACKAGE = Path(__file__).resolve().parent
_STAMP = _PACKAGE / "__pycache__" / "kernels.stamp"


def kernel_sources_digest(package: Path = _PACKAGE) -> str:
    """A digest of every module that declares kernels or uses this module's helpers."""
    digest = hashlib.blake2b(digest_size=16)
    for path in sorted(package.rglob("*.py")):
        data = path.read_bytes()
        if path.name == "jit.py" or b"jit import" in data:
            digest.update(str(path.relative_to(package)).encode() + b"\0" + data)
    return digest.hexdigest()


def drop_stale_caches(package: Path = _PACKAGE, stamp: Path = _STAMP) -> bool:
    """Delete numba's on-disk kernel caches under ``package`` when a kernel module changed
    since they were written; whether it did.

    numba keys a kernel's cache on its own file's time and size only, so a change to what
    it calls in another module (the intrinsics here, another module's kernel) would leave
    stale machine code running, silently.  Any change to any kernel module (see
    :func:`kernel_sources_digest`) drops them all; the next start recompiles.  A package
    whose caches cannot be written (installed read-only) is left alone."""
    current = kernel_sources_digest(package)
    try:
        if stamp.read_text() == current:
            return False
    except OSError:
        pass
    for cached in (*package.rglob("__pycache__/*.nbi"), *package.rglob("__pycache__/*.nbc")):
        with contextlib.suppress(OSError):  # another process may have removed it already
            cached.unlink()
    with contextlib.suppress(OSError):
        stamp.parent.mkdir(exist_ok=True)
        tmp = stamp.with_name(f"{stamp.name}.{os.getpid()}")
        tmp.write_text(current)
        tmp.replace(stamp)
    return True


drop_stale_caches()


def _readonly(array: types.Array) -> types.Array:
    return array.copy(readonly=True)


# names a signature string may use: numba's types, plus ``ro(...)`` for an array numpy hands
# out read-only (``np.frombuffer`` of ``bytes``, the usual input of a decoder), which numba
# types apart from a writable one
_NAMES = {**types.__dict__, "ro": _readonly}


def parse_signature(signature: str) -> Any:
    """A signature string, e.g. ``"i8(ro(u1[::1]), i8[::1])"``, as numba's signature."""
    return eval(signature, {"__builtins__": {}}, _NAMES)  # noqa: S307 - our own literals


def readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array``: pass kernel inputs through it so that their numba
    type is the declared ``ro(...)`` one whatever numpy handed out (``np.frombuffer`` of
    ``bytes`` is read-only, a computed array is not)."""
    if not array.flags.writeable:  # already (most inputs: numpy hands out Arrow's bytes so)
        return array
    view = array.view()
    view.flags.writeable = False
    return view


def kernel(*signatures: str, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """Declare a compiled kernel and the numba signatures :func:`warm_up` compiles for it.

    The kernel is still dispatched on argument types, so a call with another type compiles a
    new specialisation rather than failing; list every signature the project calls with
    (``ro(...)`` marks a read-only array argument, see :func:`parse_signature`).
    ``options`` go to ``njit`` (e.g. ``fastmath={"reassoc"}`` so a float reduction may be
    vectorised, ``error_model="numpy"`` so a division by zero gives inf/NaN)."""

    def wrap(fn: Callable[..., Any]) -> Any:
        compiled = numba.njit(nogil=True, cache=True, **options)(fn)
        _REGISTRY.append((compiled, signatures))
        return compiled

    return wrap


def warm_up() -> int:
    """Compile (or load from the on-disk cache) every declared signature of every kernel
    imported so far; returns how many signatures were compiled."""
    done = 0
    for compiled, signatures in _REGISTRY:
        for signature in signatures:
            compiled.compile(parse_signature(signature))
            done += 1
    return done


# -- unaligned words and byte copies ---------------------------------------------------------
# Byte-granular copies (variable-width values) go fastest as whole words at any byte offset.
# numba has no unaligned word access on a byte array, a byte loop between two arrays stays a
# byte loop (the compiler cannot rule out that they overlap), and a slice assignment copies
# byte by byte, so these intrinsics emit one unaligned load or store, or one ``memcpy``.
# None checks bounds: the caller keeps ``i + 8 <= len(array)`` (4 for ``load_u32``).


def _bytes(array: Any) -> bool:
    """Whether a numba type is a contiguous 1-D ``u1`` array (the intrinsics' byte offsets
    are element offsets only there)."""
    return (
        isinstance(array, types.Array)
        and array.dtype == types.uint8
        and array.ndim == 1
        and array.layout == "C"
    )


def _loader(bits: int, result: Any) -> Any:
    def load(typingctx: Any, array: Any, i: Any) -> Any:
        if not _bytes(array):
            return None

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            arr = context.make_array(signature.args[0])(context, builder, args[0])
            ptr = builder.gep(arr.data, [args[1]])
            return builder.load(builder.bitcast(ptr, ir.IntType(bits).as_pointer()), align=1)

        return result(array, i), codegen

    load.__name__ = load.__qualname__ = f"load_u{bits}"
    load.__doc__ = f"""The {bits // 8} bytes of a ``u1`` array at byte ``i`` as one
    little-endian ``u{bits}``."""
    return intrinsic(load)


load_u64 = _loader(64, types.uint64)
load_u32 = _loader(32, types.uint32)


@intrinsic
def store_u64(typingctx: Any, array: Any, i: Any, value: Any) -> Any:
    """Store ``value`` (a ``u64``) as the 8 bytes of a ``u1`` array at byte ``i``."""
    if not _bytes(array):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        arr = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(arr.data, [args[1]])
        word = context.cast(builder, args[2], signature.args[2], types.uint64)
        builder.store(word, builder.bitcast(ptr, ir.IntType(64).as_pointer()), align=1)
        return context.get_dummy_value()

    return types.none(array, i, value), codegen


@intrinsic
def copy_bytes(typingctx: Any, dst: Any, d: Any, src: Any, s: Any, n: Any) -> Any:
    """``dst[d:d + n] = src[s:s + n]`` for ``u1`` arrays as one ``memcpy`` (numba's slice
    assignment copies byte by byte).  No bounds checks and no overlap: the caller's."""
    if not (_bytes(dst) and _bytes(src)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        out = context.make_array(signature.args[0])(context, builder, args[0])
        inp = context.make_array(signature.args[2])(context, builder, args[2])
        cgutils.raw_memcpy(
            builder,
            builder.gep(out.data, [args[1]]),
            builder.gep(inp.data, [args[3]]),
            args[4],
            1,
        )
        return context.get_dummy_value()

    return types.none(dst, d, src, s, n), codegen
