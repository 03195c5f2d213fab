"""Self-contained tickets: everything ``do_get`` needs, so any server process can redeem one.

A ticket is compact JSON: the dataset, the pinned version, what to read (one fragment's
physical row range, or the whole version for limit/offset queries, or row ids) and how
(columns, filter, row ids, batch size).  Pinning the version is what makes a commit after
``get_flight_info`` invisible to its tickets.  Tickets are checked like any other input.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import pyarrow.flight as flight

from .errors import BadRequest
from .query import MAX_BATCH_SIZE, MAX_INT, MAX_ROW_ID, MAX_ROW_IDS, load_json

TICKET_VERSION = 1
MAX_TICKET_BYTES = 128 << 20


@dataclass
class Ticket:
    dataset: str
    version: int
    columns: list[str] | None = None
    filter: str | None = None
    with_row_id: bool = False
    batch_size: int = 65536
    fragment: int | None = None  # None: every fragment of the version, in order
    start: int | None = None  # physical row range inside ``fragment``
    stop: int | None = None
    limit: int | None = None
    offset: int | None = None
    row_ids: list[int] | None = None
    nearest: dict | None = None  # a nearest-neighbour search over the whole version
    prefilter: bool = False

    def encode(self) -> flight.Ticket:
        body = {k: v for k, v in asdict(self).items() if v is not None and v is not False}
        body["v"] = TICKET_VERSION
        return flight.Ticket(json.dumps(body, separators=(",", ":")).encode())

    @classmethod
    def decode(cls, raw: bytes) -> Ticket:
        if len(raw) > MAX_TICKET_BYTES:
            raise BadRequest("the ticket is too large")
        body = load_json(raw, "the ticket")
        if not isinstance(body, dict) or body.pop("v", None) != TICKET_VERSION:
            raise BadRequest("the ticket is not one this server issued (unknown format)")
        fields = set(cls.__dataclass_fields__)
        if set(body) - fields:
            raise BadRequest(f"the ticket has unknown fields {sorted(set(body) - fields)}")
        try:
            t = cls(**body)
        except TypeError:
            raise BadRequest("the ticket is missing its dataset or version") from None
        t._check()
        return t

    def _check(self) -> None:
        def is_int(v: object, lo: int = 0, hi: int = MAX_INT) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi

        ok = (
            isinstance(self.dataset, str)
            and is_int(self.version, 1)
            and (
                self.columns is None
                or (
                    isinstance(self.columns, list) and all(isinstance(c, str) for c in self.columns)
                )
            )
            and (self.filter is None or isinstance(self.filter, str))
            and isinstance(self.with_row_id, bool)
            and isinstance(self.prefilter, bool)
            and (self.nearest is None or isinstance(self.nearest, dict))
            and is_int(self.batch_size, 1)
            and self.batch_size <= MAX_BATCH_SIZE
            and all(
                v is None or is_int(v)
                for v in (self.fragment, self.start, self.stop, self.limit, self.offset)
            )
            and (self.start is None) == (self.stop is None)
            and (
                self.start is None
                or (self.stop is not None and self.start <= self.stop and self.fragment is not None)
            )
            and (
                self.row_ids is None
                or (
                    isinstance(self.row_ids, list)
                    and len(self.row_ids) <= MAX_ROW_IDS
                    and all(is_int(r, hi=MAX_ROW_ID) for r in self.row_ids)
                )
            )
        )
        if not ok:
            raise BadRequest("the ticket's fields are malformed")
