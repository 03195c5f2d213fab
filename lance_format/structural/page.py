"""What a structural page encoder hands the file writer: a layout and its buffers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..pb import encodings_v2_1_pb2 as pb


@dataclass
class EncodedPage:
    """One page of one column, ready to be written: buffers in layout order."""

    layout: pb.PageLayout
    buffers: list[np.ndarray | bytes]
    num_rows: int
    external: list[np.ndarray | bytes] | None = None  # blob bytes written before the page

    @property
    def nbytes(self) -> int:
        return sum(map(len, self.buffers))
