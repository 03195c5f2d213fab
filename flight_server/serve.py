"""``lance-flight serve``: run the server, alone or as N worker processes.

Python's GIL caps one process at about one core of decoding, so ``--workers N`` starts N
processes on consecutive ports (free ones with ``--port 0``); each knows every sibling's
location, so the endpoints of one ``FlightInfo`` spread over all of them.  The parent
supervises: it prints one listening line once every worker is up, forwards SIGTERM/SIGINT,
and exits 0 when they all stopped cleanly; with ``--metrics-port`` it also serves the one
``/metrics`` summing every worker's.  Auth tokens are signed with one secret made by
the parent, so a token issued by any worker is accepted by all.  ``--rest-port P`` adds the
Lance Namespace REST API (:mod:`flight_server.rest`) to every process, all on port P.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import queue
import signal
import socket
import sys
import threading
import time
from typing import Any

from . import tracing
from .memory import tune_for_serving, warm_heaps
from .sql.limits import DEFAULT_MAX_STATEMENTS, DEFAULT_QUEUE_SECONDS, DEFAULT_TIMEOUT, SqlLimits

log = logging.getLogger("lance_flight")
EXTRA_SECONDS = 2.0  # after the grace period: for aborting puts to clean up
MAX_RESTARTS, RESTART_WINDOW = 5, 60.0  # more worker deaths than this per window: give up


def _bytes(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().rstrip("b").rstrip("i")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


class _AuthFlag(argparse.Action):
    """``--auth`` alone used to be an ambiguous abbreviation of the two auth flags: name them."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.error(
            "--auth is not an option: pass --auth-users FILE (user:password-hash[:role] lines, "
            "made with 'python -m flight_server.auth hash --user NAME') and/or "
            "--auth-tokens FILE (static bearer tokens, 'python -m flight_server.auth token')"
        )


def _rate(text: str):
    from .loginlimit import Rate

    try:
        return Rate.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _role_map(text: str) -> dict[str, str]:
    from .jwtauth import parse_role_map

    try:
        return parse_role_map(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "root",
        help="directory or object-store URI (s3://bucket/prefix, s3+ddb://...?ddbTableName=T) "
        "holding the datasets (names are paths under it)",
    )
    p.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="object-store option, as pylance names them (endpoint, region, allow_http, "
        "aws_access_key_id, ...); repeat for several (default: none, AWS_* variables apply)",
    )
    p.add_argument(
        "--host", default="127.0.0.1", metavar="HOST", help="interface to listen on (0.0.0.0: all)"
    )
    p.add_argument("--port", type=int, default=8815, help="first port (0: a free port)")
    p.add_argument(
        "--public-host",
        metavar="HOST",
        help="host name clients use in endpoint locations (default: --host, or this "
        "machine's FQDN when --host is 0.0.0.0)",
    )
    p.add_argument(
        "--cache-bytes",
        type=_bytes,
        default="256M",
        metavar="SIZE",
        help="search cache budget (bytes, or with a K/M/G suffix)",
    )
    p.add_argument(
        "--page-cache-bytes",
        type=_bytes,
        default="256M",
        metavar="SIZE",
        help="decoded-page cache budget: Arrow arrays of hot pages, so repeated reads skip "
        "decoding (bytes, or with a K/M/G suffix; 0: off)",
    )
    p.add_argument(
        "--workers", type=int, default=1, metavar="N", help="server processes (one core each)"
    )
    p.add_argument(
        "--advertise",
        nargs="*",
        default=[],
        metavar="LOCATION",
        help="locations of other servers on the same root, added to every FlightInfo's "
        "endpoints (e.g. grpc://host2:8815)",
    )
    p.add_argument(
        "--no-warm",
        action="store_true",
        help="skip warming the search cache and the decode heaps and compiling the decode "
        "kernels at start (they then compile on first use)",
    )
    p.add_argument(
        "--warm-heap-bytes",
        type=_bytes,
        default=None,
        metavar="SIZE",
        help="heap memory faulted in at start for the first reads' decode buffers (bytes, or "
        "with a K/M/G suffix; 0: none; default 64 MiB for each decoding thread's heap, at "
        "most 4 of them; skipped with --no-warm)",
    )
    p.add_argument(
        "--no-fsync",
        action="store_true",
        help="do not fsync local data files and manifests before a commit is acknowledged "
        "(as pylance's local store: faster writes; a commit still survives a crash of the "
        "server, but not a power loss)",
    )
    p.add_argument("--no-sql", action="store_true", help="do not answer Flight SQL commands")
    p.add_argument(
        "--no-large-message",
        action="store_true",
        help="send pyarrow clients no 8 MB message early in a scan (the message saves a new "
        "client half its CPU; use this for clients or proxies that limit messages to less)",
    )
    p.add_argument(
        "--sql-timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds of DuckDB work a Flight SQL statement may use before it is stopped "
        "(DEADLINE_EXCEEDED); 0: no limit (default: %(default)s)",
    )
    p.add_argument(
        "--sql-memory-limit",
        help="DuckDB memory limit for all statements of a process, e.g. 4GiB; a statement "
        "needing more fails with RESOURCE_EXHAUSTED (default: a quarter of RAM, at most 2GiB)",
    )
    p.add_argument(
        "--sql-threads",
        type=int,
        help="DuckDB threads per process (default: half the cores, at least 1)",
    )
    p.add_argument(
        "--sql-max-statements",
        type=int,
        default=DEFAULT_MAX_STATEMENTS,
        help="Flight SQL statements running at once per process; one more waits up to "
        "--sql-queue-seconds, then gets RESOURCE_EXHAUSTED (default: %(default)s)",
    )
    p.add_argument(
        "--sql-queue-seconds",
        type=float,
        default=DEFAULT_QUEUE_SECONDS,
        help="how long a statement waits for a free slot (default: %(default)s)",
    )
    p.add_argument(
        "--shutdown-grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds running calls get to finish after SIGTERM/SIGINT",
    )
    p.add_argument("--tls-cert", metavar="PEM", help="certificate (chain): serve grpc+tls")
    p.add_argument("--tls-key", metavar="PEM", help="unencrypted private key of --tls-cert")
    p.add_argument(
        "--auth-users",
        metavar="FILE",
        help="turn on authentication: users file, one user:password-hash[:role] per line "
        "(role read or write; lines from 'python -m flight_server.auth hash --user NAME')",
    )
    p.add_argument(
        "--auth-tokens",
        metavar="FILE",
        help="turn on authentication: static bearer tokens file, one 'TOKEN [USER [ROLE]]' "
        "per line (from 'python -m flight_server.auth token'); bearer tokens issued at "
        "login are signed with $LANCE_FLIGHT_SECRET (random per start when unset)",
    )
    p.add_argument("--auth", nargs="?", action=_AuthFlag, help=argparse.SUPPRESS)
    p.add_argument(
        "--jwt-jwks",
        metavar="FILE|URL",
        help="turn on authentication: also accept an identity provider's JWTs, verified "
        "with this JWK set (a JSON file, or an http(s) URL fetched and cached)",
    )
    p.add_argument("--jwt-issuer", metavar="ISS", help="the 'iss' external JWTs must carry")
    p.add_argument("--jwt-audience", metavar="AUD", help="the 'aud' external JWTs must carry")
    p.add_argument(
        "--jwt-roles-claim",
        default="roles",
        metavar="CLAIM",
        help="claim of an external JWT holding its roles, a string or a list "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--jwt-role-map",
        type=_role_map,
        metavar="EXT=ROLE,...",
        help="which roles-claim values mean read or write (default: read=read,write=write)",
    )
    p.add_argument(
        "--jwt-user-claim",
        default="sub",
        metavar="CLAIM",
        help="claim of an external JWT naming the user (default: %(default)s)",
    )
    p.add_argument(
        "--login-limit",
        type=_rate,
        default="5/30",
        metavar="BURST/SECONDS",
        help="failed logins per user: BURST, then one per SECONDS (default 5/30; 0: no limit)",
    )
    p.add_argument(
        "--login-server-limit",
        type=_rate,
        default="20/2",
        metavar="BURST/SECONDS",
        help="failed password logins for the whole server (default 20/2; 0: no limit)",
    )
    p.add_argument(
        "--max-message-bytes",
        type=_bytes,
        default="16M",
        metavar="BYTES",
        help="largest ticket, command, action body or put metadata accepted (default 16M)",
    )
    p.add_argument(
        "--max-batch-bytes",
        type=_bytes,
        default="256M",
        metavar="BYTES",
        help="largest record batch one put message may carry (default 256M)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (with --workers: one "
        "endpoint, served by the supervisor, summing every worker)",
    )
    p.add_argument(
        "--rest-port",
        type=int,
        metavar="PORT",
        help="also serve the Lance Namespace REST API on this port (0: a free one; every "
        "worker shares it)",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        metavar="LEVEL",
        help="DEBUG, INFO, WARNING or ERROR (logs go to stderr)",
    )
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="log lines as logfmt key=value text or as JSON objects, one per line; request "
        "lines carry request_id (the client's x-request-id, or a new one) and trace_id (from "
        "a W3C traceparent header) (default: %(default)s)",
    )
    p.add_argument(
        "--otel",
        action="store_true",
        help="OpenTelemetry tracing: a server span per call, child of the client's W3C "
        "traceparent, exported as the OTEL_* variables say (needs lance-flight[otel])",
    )


def serve(args: argparse.Namespace) -> int:
    from .logs import configure

    configure(args.log_level, getattr(args, "log_format", "text"))
    if args.workers < 1:
        print("error: --workers must be at least 1", file=sys.stderr)
        return 2
    if bool(args.tls_cert) != bool(args.tls_key):
        print("error: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    if (args.jwt_issuer or args.jwt_audience or args.jwt_role_map) and not args.jwt_jwks:
        print("error: the --jwt-* options need --jwt-jwks", file=sys.stderr)
        return 2
    secret = None
    if args.auth_users or args.auth_tokens or args.jwt_jwks:
        from .auth import generate_secret

        secret = os.environ.get("LANCE_FLIGHT_SECRET") or generate_secret()
    scheme = "grpc+tls" if args.tls_cert else "grpc"
    public = args.public_host or (socket.getfqdn() if args.host == "0.0.0.0" else args.host)
    ports = _ports(args.host, args.port, args.workers)
    if args.rest_port == 0 and args.workers > 1:  # one port all workers share: pick it here
        args.rest_port = _ports(args.host, 0, 2)[0]
    locations = [f"{scheme}://{public}:{p}" for p in ports] + list(args.advertise)
    if args.workers == 1:
        return _run(vars(args), ports[0], locations if len(locations) > 1 else None, secret, None)
    if args.metrics_port is None:
        return _supervise(args, ports, locations, secret)
    return _supervise_with_metrics(args, ports, locations, secret)


def _supervise_with_metrics(args, ports: list[int], locations: list[str], secret) -> int:
    """Workers write their metrics into a directory of this process's (prometheus_client's
    multiprocess mode, set up before any worker starts); this process serves the one
    ``/metrics`` summing them, and removes the directory when it exits."""
    import shutil
    import tempfile

    from .metrics import MULTIPROC_ENV, multiprocess_registry, serve_metrics

    directory = tempfile.mkdtemp(prefix="lance-flight-metrics-")
    os.environ[MULTIPROC_ENV] = directory  # inherited by the spawned workers
    args.metrics_dir = directory
    try:
        try:
            endpoint = serve_metrics(multiprocess_registry(directory), args.host, args.metrics_port)
        except OSError as exc:
            print(f"error: metrics port {args.metrics_port}: {exc}", file=sys.stderr)
            return 2
        with endpoint:
            log.info("metrics of all workers on %s", endpoint.url)
            return _supervise(args, ports, locations, secret)
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(directory, ignore_errors=True)


def storage_options(pairs: list[str]) -> dict[str, str] | None:
    """``["k=v", ...]`` from ``--storage-option`` as a dict (None when none were given)."""
    from lance_format.errors import InvalidArgumentError

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidArgumentError(f"--storage-option takes KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out or None


def _ports(host: str, port: int, n: int) -> list[int]:
    if port:
        return [port + i for i in range(n)]
    if n == 1:
        return [0]
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def sql_limits(opts: dict) -> SqlLimits:
    """The Flight SQL limits the ``--sql-*`` options ask for."""
    timeout = opts.get("sql_timeout", DEFAULT_TIMEOUT)
    return SqlLimits(
        timeout=timeout if timeout else None,
        memory_limit=opts.get("sql_memory_limit"),
        threads=opts.get("sql_threads"),
        max_statements=opts.get("sql_max_statements", DEFAULT_MAX_STATEMENTS),
        queue_seconds=opts.get("sql_queue_seconds", DEFAULT_QUEUE_SECONDS),
    )


def _build(opts: dict, port: int, locations: list[str] | None, secret: str | None, index: int):

    from .limits import DEFAULT_MAX_BATCH_BYTES, DEFAULT_MAX_MESSAGE_BYTES, Limits
    from .server import DEFAULT_PAGE_CACHE_BYTES, LanceFlightServer

    authenticator = None
    if opts.get("auth_users") or opts.get("auth_tokens") or opts.get("jwt_jwks"):
        from .auth import Authenticator
        from .loginlimit import DEFAULT_SERVER_RATE, DEFAULT_USER_RATE, LoginLimiter

        limiter = LoginLimiter(
            opts.get("login_limit") or DEFAULT_USER_RATE,
            opts.get("login_server_limit") or DEFAULT_SERVER_RATE,
        )
        authenticator = Authenticator.from_files(
            opts.get("auth_users"),
            opts.get("auth_tokens"),
            secret=secret,
            limiter=limiter,
            external=_external_jwt(opts),
        )
    metrics = None
    if opts.get("metrics_port") is not None:
        from .metrics import ServerMetrics

        metrics = ServerMetrics()
    scheme = "grpc+tls" if opts.get("tls_cert") else "grpc"
    server = LanceFlightServer(
        opts["root"],
        f"{scheme}://{opts['host']}:{port}",
        cache_bytes=opts["cache_bytes"],
        page_cache_bytes=opts.get("page_cache_bytes", DEFAULT_PAGE_CACHE_BYTES),
        locations=locations,
        warm=not opts.get("no_warm"),
        authenticator=authenticator,
        tls_cert=opts.get("tls_cert"),
        tls_key=opts.get("tls_key"),
        metrics=metrics,
        sql=not opts.get("no_sql"),
        large_messages=not opts.get("no_large_message"),
        limits=Limits(
            max_message_bytes=opts.get("max_message_bytes") or DEFAULT_MAX_MESSAGE_BYTES,
            max_batch_bytes=opts.get("max_batch_bytes") or DEFAULT_MAX_BATCH_BYTES,
        ),
        sql_limits=sql_limits(opts),
        storage_options=storage_options(opts.get("storage_option") or []),
        middleware=tracing.middleware(bool(opts.get("otel"))),
    )
    endpoints: list[Any] = []  # each has close()
    rest_url = None
    if metrics is not None and not opts.get("metrics_dir"):  # else the supervisor serves them
        from .metrics import serve_metrics

        endpoints.append(serve_metrics(metrics, opts["host"], opts["metrics_port"]))
        log.info("metrics on %s", endpoints[-1].url)
    if opts.get("rest_port") is not None:
        from .rest import RestApp, RestServer

        app = RestApp(server.context, authenticator=authenticator)
        rest = RestServer(
            app,
            opts["host"],
            opts["rest_port"],
            tls_cert=opts.get("tls_cert"),
            tls_key=opts.get("tls_key"),
            reuse_port=opts.get("workers", 1) > 1,
        )
        endpoints.append(rest.start())
        rest_url = rest.url
    return server, endpoints, rest_url


def _external_jwt(opts: dict):
    """The external JWT verifier the ``--jwt-*`` options ask for (None without a JWKS)."""
    if not opts.get("jwt_jwks"):
        return None
    from .jwtauth import ExternalJwt

    return ExternalJwt(
        opts["jwt_jwks"],
        issuer=opts.get("jwt_issuer"),
        audience=opts.get("jwt_audience"),
        roles_claim=opts.get("jwt_roles_claim") or "roles",
        role_map=opts.get("jwt_role_map"),
        user_claim=opts.get("jwt_user_claim") or "sub",
    )


def _run(opts, port, locations, secret, ready, index: int = 0, parent: int | None = None) -> int:
    """One server process: build, announce, serve until a signal asks it to stop (or, for a
    worker, until its supervisor is gone)."""
    import pyarrow as pa

    from lance_format.errors import LanceError

    stopping = threading.Event()

    def stop(signum, frame) -> None:
        log.info("signal %s: shutting down (grace %.1fs)", signum, opts["shutdown_grace"])
        stopping.set()

    # before the server exists: it serves from its construction, so a client (or the
    # supervisor forwarding a SIGTERM) may reach it before it has announced itself
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    tuned = tune_for_serving()
    log.debug("allocators tuned: %s", ", ".join(tuned) or "none")
    if not opts.get("no_warm"):
        compile_kernels()
        if "glibc" in tuned:  # elsewhere freed memory may go back: nothing to warm
            touched = warm_heaps(opts.get("warm_heap_bytes"))
            log.info("faulted in %d MiB of decode heaps", touched >> 20)
    from lance_format import storage

    storage.local_durability(not opts.get("no_fsync"))
    try:
        server, endpoints, rest_url = _build(opts, port, locations, secret, index)
    except (LanceError, OSError, pa.ArrowException) as exc:  # bad root, port taken, TLS files
        if ready is not None:
            ready.put(("error", str(exc)))
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if ready is not None:
        ready.put(("ok", server.location))
    else:
        print(f"lance-flight listening on {server.location}", flush=True)
        if rest_url:
            print(f"Lance Namespace REST API on {rest_url}", flush=True)
    # the server runs from its construction; the main thread only waits for a signal (a
    # pyarrow ``serve()`` would shut down without a deadline: one stalled client would keep
    # the process alive for ever)
    while not stopping.wait(0.5):
        if parent is not None and os.getppid() != parent:
            log.warning("the supervisor is gone: shutting down")
            stopping.set()
    return _shutdown(server, endpoints, float(opts["shutdown_grace"]))


def compile_kernels() -> None:
    """Compile the format's kernels (or load them from numba's on-disk cache) before the
    server accepts a request, so that no user pays for compilation."""
    import lance_format

    started = time.perf_counter()
    count = lance_format.compile_kernels()
    log.info("%d kernel signatures ready in %.2fs", count, time.perf_counter() - started)


def _shutdown(server, endpoints, grace: float) -> int:
    """Stop taking calls, give running ones ``grace`` seconds, then end the rest: streams
    that still pull batches fail with UNAVAILABLE, puts abort and remove their files; a call
    blocked on a client that neither reads nor sends ends with the process."""
    server.begin_shutdown(grace)
    closer = threading.Thread(target=server.shutdown, daemon=True)
    closer.start()
    closer.join(grace + EXTRA_SECONDS)
    for endpoint in endpoints:
        endpoint.close()
    if closer.is_alive():
        log.warning("calls still open %.1fs after the grace period; exiting", EXTRA_SECONDS)
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)
    log.info("stopped")
    return 0


def _worker(opts, port, locations, secret, ready, index) -> None:
    from .logs import configure

    configure(opts.get("log_level", "INFO"), opts.get("log_format", "text"))  # a new process
    sys.exit(_run(opts, port, locations, secret, ready, index, parent=os.getppid()))


def _supervise(args, ports: list[int], locations: list[str], secret: str | None) -> int:
    """Start one worker per port, announce once all listen, restart a worker that dies on its
    own (its location is in every sibling's endpoints), forward SIGTERM/SIGINT, exit 0 when
    every worker stopped cleanly."""
    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    opts = vars(args)
    stopping = threading.Event()

    def forward(signum, frame) -> None:
        stopping.set()
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGTERM)

    def start(i: int):
        p = ctx.Process(target=_worker, args=(opts, ports[i], locations, secret, ready, i))
        p.start()
        return p

    procs: list = []
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    procs.extend(start(i) for i in range(len(ports)))
    if not _await_ready(ready, procs, len(procs), stopping) or stopping.is_set():
        for p in procs:
            p.terminate()
        return 2
    print(f"lance-flight listening on {locations[0]}", flush=True)
    print(f"workers: {' '.join(locations[: len(procs)])}", flush=True)
    if args.rest_port is not None:
        host = f"[{args.host}]" if ":" in args.host else args.host
        scheme = "https" if args.tls_cert else "http"
        print(f"Lance Namespace REST API on {scheme}://{host}:{args.rest_port}", flush=True)
    restarts: list[float] = []
    failed = False
    while True:
        mp.connection.wait([p.sentinel for p in procs], timeout=0.5)
        if stopping.is_set():
            if all(not p.is_alive() for p in procs):
                break
            continue
        for i, p in enumerate(procs):
            # a Ctrl-C reaches the workers too: give the signal time to reach us as well
            if p.is_alive() or stopping.wait(0.2):
                continue
            now = time.monotonic()
            restarts = [t for t in restarts if now - t < RESTART_WINDOW] + [now]
            if len(restarts) > MAX_RESTARTS:
                log.error(
                    "workers keep dying (%d restarts in %.0fs): stopping",
                    MAX_RESTARTS,
                    RESTART_WINDOW,
                )
                failed = True
                forward(signal.SIGTERM, None)
                break
            log.warning("worker %d (pid %s) exited with %s; restarting", i, p.pid, p.exitcode)
            _worker_exited(opts, p.pid)
            procs[i] = start(i)
            if not _await_ready(ready, [procs[i]], 1, stopping):
                failed = True
                forward(signal.SIGTERM, None)
    for i, p in enumerate(procs):
        _worker_exited(opts, p.pid)
        if p.exitcode != 0:
            log.error("worker %d (pid %s) exited with %s", i, p.pid, p.exitcode)
    return 0 if not failed and all(p.exitcode == 0 for p in procs) else 1


def _worker_exited(opts: dict, pid: int | None) -> None:
    """Drop an exited worker's live gauges from the summed metrics (multiprocess mode)."""
    if opts.get("metrics_dir") and pid is not None:
        from .metrics import worker_exited

        worker_exited(pid, opts["metrics_dir"])


def _await_ready(ready, procs: list, n: int, stopping: threading.Event) -> bool:
    """Wait for ``n`` workers to report; False if one failed or died first.  A stop request
    ends the wait without failure: a restarted worker may already serve (and be told to stop)
    before its readiness message, sent by a queue feeder thread, arrives."""
    got = 0
    while got < n:
        try:
            status, what = ready.get(timeout=0.5)
        except queue.Empty:
            if stopping.is_set():  # asked to stop: nothing failed, nothing to wait for
                return True
            if any(p.exitcode not in (None, 0) for p in procs):
                print("error: a worker stopped before listening", file=sys.stderr)
                return False
            continue
        if status != "ok":
            print(f"error: a worker failed to start: {what}", file=sys.stderr)
            return False
        got += 1
    return True
