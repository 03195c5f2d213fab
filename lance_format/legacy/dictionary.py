"""v1 dictionary encoding: plain keys in the page, the values once per file.

Keys and values are encoded separately, each with a primitive encoding.  The keys are the Arrow dictionary's indices, plain-encoded (a null key keeps whatever index the
Arrow buffer held, so it reads back as a value, as in pylance).  The values live at the
schema field's ``dictionary {offset, length}``: binary-encoded for strings and binary (read
as nullable, so an empty value is null), plain for integers.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..errors import CorruptFileError, UnsupportedError
from ..io import RandomAccessFile
from . import binary, plain
from . import rows as R


def load_values(
    file: RandomAccessFile, value_type: pa.DataType, offset: int, length: int, what: str
) -> pa.Array:
    """The dictionary's values, validated against the file size first."""
    if length < 0 or offset < 0 or offset > file.size:
        raise CorruptFileError(f"{what}: dictionary at {offset} with {length} values")
    whole = np.array([[0, length]], dtype=np.int64)
    if binary.is_binary_like(value_type):
        if 8 * (length + 1) > file.size - offset:
            raise CorruptFileError(f"{what}: dictionary positions run past the end of the file")
        entries = plain.read_integers(
            file, np.dtype(np.int64), [(offset, length + 1, R.with_end_entry(whole))], what
        )
        return binary.read(file, value_type, True, whole, entries, what)
    if pa.types.is_integer(plain.storage(value_type)):
        return plain.read(file, value_type, [(offset, length, whole)], what)
    raise UnsupportedError(f"{what}: dictionary values of type {value_type} are not supported")


def build(t: pa.DataType, keys: np.ndarray, values: pa.Array, what: str) -> pa.Array:
    """A DictionaryArray of type ``t`` after checking every key indexes a value."""
    if len(keys) and (keys.min() < 0 or keys.max() >= len(values)):
        raise CorruptFileError(
            f"{what}: dictionary key outside the {len(values)} dictionary values"
        )
    st = plain.storage(t)
    indices = pa.Array.from_buffers(st.index_type, len(keys), [None, pa.py_buffer(keys)])
    arr = pa.DictionaryArray.from_arrays(indices, values, ordered=st.ordered, safe=False)
    if st is not t:
        arr = pa.ExtensionArray.from_storage(t, arr)
    return arr
