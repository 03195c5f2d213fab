"""The Lance 2.0 data-file format: one column per field, ``lance.encodings.ArrayEncoding``."""

from .decoder import decode_v20_field, take_v20_field, v20_column_fields

__all__ = ["decode_v20_field", "take_v20_field", "v20_column_fields"]
