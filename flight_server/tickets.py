"""Self-contained tickets: everything ``do_get`` needs, so any server process can redeem one.

A ticket is compact JSON of a :class:`.wire.Ticket`: the dataset, the pinned version, what to
read (one fragment's physical row range, or the whole version for limit/offset queries, or
row ids) and how (columns, filter, row ids, batch size).  Pinning the version is what makes a
commit after ``get_flight_info`` invisible to its tickets.  Tickets are checked like any
other input.
"""

from __future__ import annotations

import json

import pyarrow.flight as flight

from . import wire
from .errors import BadRequest
from .query import load_json

TICKET_VERSION = 1
MAX_TICKET_BYTES = 128 << 20


class Ticket(wire.Ticket):
    def encode(self) -> flight.Ticket:
        body = self.model_dump(exclude_defaults=True)
        body["v"] = TICKET_VERSION
        return flight.Ticket(json.dumps(body, separators=(",", ":")).encode())

    @classmethod
    def decode(cls, raw: bytes) -> Ticket:
        if len(raw) > MAX_TICKET_BYTES:
            raise BadRequest("the ticket is too large")
        body = load_json(raw, "the ticket")
        if not isinstance(body, dict) or body.pop("v", None) != TICKET_VERSION:
            raise BadRequest("the ticket is not one this server issued (unknown format)")
        return wire.parse(cls, body, "the ticket")
