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

_REGISTRY: list[tuple[Any, tuple[str, ...]]] = []


def kernel(*signatures: str, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """Declare a compiled kernel and the numba signatures :func:`warm_up` compiles for it.

    The kernel is still dispatched on argument types, so a call with another type compiles a
    new specialisation rather than failing; list every signature the project calls with.
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
            compiled.compile(signature)
            done += 1
    return done
