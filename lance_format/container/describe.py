"""Compact, human-readable descriptions of encoding trees (for ``inspect`` and writer stats).

``MiniBlock[AV_ITEM] values=InlineBitpacking(32)`` reads better in a terminal than a
protobuf dump, and tests can assert on which encodings were chosen.
"""

from __future__ import annotations

from google.protobuf.message import Message

from ..compression.decompress import describe as describe_compression

_LAYER_NAMES = {
    1: "AV_ITEM",
    2: "AV_LIST",
    3: "N_ITEM",
    4: "N_LIST",
    5: "E_LIST",
    6: "NE_LIST",
}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def describe(msg: Message | None) -> str:
    """One line: oneof choices by name, scalar fields in parentheses, layers by short name."""
    if msg is None:
        return "-"
    d = msg.DESCRIPTOR
    if d.full_name == "lance.encodings21.CompressiveEncoding":
        return describe_compression(msg)  # the codecs' own compact notation
    if len(d.oneofs) == 1 and len(d.oneofs[0].fields) == len(d.fields):
        # a pure wrapper (PageLayout, CompressiveEncoding, ArrayEncoding): show the choice
        chosen = msg.WhichOneof(d.oneofs[0].name)
        if chosen is None:
            return "-"
        value = getattr(msg, chosen)
        return _camel(chosen) + (_body(value) if isinstance(value, Message) else f"={value}")
    return _body(msg) or d.name


def _body(msg: Message) -> str:
    parts = []
    for fd, value in msg.ListFields():
        if fd.name == "layers":
            parts.append("[" + ",".join(_LAYER_NAMES.get(v, str(v)) for v in value) + "]")
        elif fd.message_type is not None:
            if fd.is_repeated:
                parts.append(f"{fd.name}=[" + ", ".join(describe(v) for v in value) + "]")
            else:
                parts.append(f"{fd.name}={describe(value)}")
        elif fd.type == fd.TYPE_BYTES:
            parts.append(f"{fd.name}=<{len(value)}B>")
        elif fd.is_repeated:
            parts.append(f"{fd.name}={list(value)}")
        else:
            parts.append(f"{fd.name}={value}")
    return "(" + " ".join(parts) + ")" if parts else ""
