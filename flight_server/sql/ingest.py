"""Bulk ingest (``CommandStatementIngest``): a DoPut stream becomes a dataset version.

The table definition options choose the write, as the ADBC driver sends them:

=====================  ===============  ==================  =================================
adbc_ingest mode       if_not_exist     if_exists           here
=====================  ===============  ==================  =================================
``append``             FAIL             APPEND              append; missing table: NOT_FOUND
``create``             CREATE           FAIL                create; existing table: error
``replace``            CREATE           REPLACE             overwrite (new schema allowed)
``create_append``      CREATE           APPEND              create or append
=====================  ===============  ==================  =================================

The write itself is the server's do_put path (:func:`flight_server.ingest.ingest`): the
stream is written into fragments as it arrives (realigned where gRPC left buffers unaligned)
and committed once, with the datasets' conflict-checked commit, when it ends cleanly; a failed
stream commits nothing and leaves no files.  The table is
named like any other (``table`` + optional ``schema`` -> ``schema/table`` under the root; see
:mod:`.naming`).  ``temporary`` tables and transactions are not supported.  Options
(``CommandStatementIngest.options``): ``lance.max_rows_per_file`` and
``lance.data_storage_version``.
"""

from __future__ import annotations

from collections.abc import Callable

from lance_format.errors import InvalidArgumentError, UnsupportedError

from . import flight_sql_pb2 as pb
from .errors import AlreadyExistsError, NotFoundError
from .naming import dataset_for

__all__ = ["IngestPlan", "plan_ingest"]

_Opts = pb.CommandStatementIngest.TableDefinitionOptions
OPTION_MAX_ROWS = "lance.max_rows_per_file"
OPTION_STORAGE_VERSION = "lance.data_storage_version"


class IngestPlan:
    """Where and how an ingest writes: dataset name, write mode and writer options."""

    def __init__(self, dataset: str, mode: str, options: dict[str, int | str]):
        self.dataset = dataset
        self.mode = mode
        self.options = options

    def __repr__(self) -> str:
        return f"IngestPlan({self.dataset!r}, {self.mode!r}, {self.options!r})"


def plan_ingest(cmd: pb.CommandStatementIngest, exists: Callable[[str], bool]) -> IngestPlan:
    """Decide the write for ``cmd``; ``exists(name)`` says whether a dataset exists."""
    if cmd.temporary:
        raise UnsupportedError("temporary tables are not supported")
    if cmd.HasField("transaction_id"):
        raise UnsupportedError("transactions are not supported: ingest commits on its own")
    opts = cmd.table_definition_options
    if opts.if_not_exist == _Opts.TABLE_NOT_EXIST_OPTION_UNSPECIFIED:
        raise InvalidArgumentError("ingest: table_definition_options.if_not_exist is not set")
    if opts.if_exists == _Opts.TABLE_EXISTS_OPTION_UNSPECIFIED:
        raise InvalidArgumentError("ingest: table_definition_options.if_exists is not set")
    name = dataset_for(
        cmd.table,
        cmd.schema if cmd.HasField("schema") else None,
        cmd.catalog if cmd.HasField("catalog") else None,
    )
    options: dict[str, int | str] = {}
    for key, value in cmd.options.items():
        if key == OPTION_MAX_ROWS:
            try:
                options["max_rows_per_file"] = int(value)
            except ValueError:
                raise InvalidArgumentError(f"ingest option {key} must be an integer") from None
        elif key == OPTION_STORAGE_VERSION:
            options["data_storage_version"] = value
        else:
            raise InvalidArgumentError(
                f"unknown ingest option {key!r} (known: {OPTION_MAX_ROWS}, "
                f"{OPTION_STORAGE_VERSION})"
            )
    if exists(name):
        if opts.if_exists == _Opts.TABLE_EXISTS_OPTION_FAIL:
            raise AlreadyExistsError(f"table {name!r} already exists (ingest mode create)")
        mode = "append" if opts.if_exists == _Opts.TABLE_EXISTS_OPTION_APPEND else "overwrite"
        if mode == "append":
            options.pop("data_storage_version", None)  # an append keeps the dataset's
    else:
        if opts.if_not_exist == _Opts.TABLE_NOT_EXIST_OPTION_FAIL:
            raise NotFoundError(f"table {name!r} does not exist (ingest mode append)")
        mode = "create"
    return IngestPlan(name, mode, options)
