"""Compiled kernels for the hot loops numpy cannot express in one call.

Every kernel in the project is declared with :func:`kernel`: numba ``njit`` with ``nogil``
(so the reader's decode threads run kernels on every core) and ``cache`` (so a process loads
machine code from ``__pycache__`` instead of compiling).  Kernels are compiled lazily, but each
declares the signatures it is called with, and :func:`warm_up` compiles all of them: the server
calls it at start, so no user request pays for compilation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numba.core import types

_REGISTRY: list[tuple[Any, tuple[str, ...]]] = []


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
