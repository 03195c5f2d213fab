"""The Docker image's steps, followed without Docker (no daemon here): its build stage builds
a wheel from exactly the files it copies; that wheel, installed alone, provides the
``lance-flight`` entry point that runs the image's command on a dataset root, and the image's
health check finds the server healthy.  The runtime dependencies come from this venv instead
of the image's ``pip install``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pyarrow as pa
from flight_fixtures import free_port
from repo_paths import REPO

import lance_format as lf

DOCKERFILE = (REPO / "Dockerfile").read_text()


def _build_stage_copies() -> list[str]:
    build = DOCKERFILE.split("\nFROM ", 2)[1]  # the first stage
    sources: list[str] = []
    for line in build.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            sources.extend(line.split()[1:-1])
    return sources


def test_the_image_wheel_serves_and_passes_its_health_check(tmp_path):
    assert "pip wheel --no-deps" in DOCKERFILE
    src = tmp_path / "src"
    src.mkdir()
    for name in _build_stage_copies():
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, src / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["--wheel-dir", str(wheels), str(src)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("*.whl")
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site)]
        + [str(wheel)],
        check=True,
        capture_output=True,
    )
    data = tmp_path / "data"
    lf.write_dataset(pa.table({"id": list(range(100))}), str(data / "points"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)  # the wheel's code only, never the checkout's
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", DOCKERFILE, re.M).group(1))
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", DOCKERFILE, re.M).group(1))
    port = str(free_port())
    cmd = [str(data) if a == "/data" else port if a == "8815" else a for a in cmd]
    assert entry == ["lance-flight"] and (site / "bin" / "lance-flight").exists()
    server = subprocess.Popen(
        [str(site / "bin" / "lance-flight"), *cmd, "--no-warm"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "listening on" in server.stdout.readline(), server.stderr.read()
        probe = subprocess.run(
            [sys.executable, "-c", "import flight_server; print(flight_server.__file__)"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert probe.stdout.startswith(str(site)), probe.stdout
        health = re.search(r"CMD (python -m flight_server\.health.*?) \|\|", DOCKERFILE).group(1)
        env["LANCE_FLIGHT_HEALTH_URI"] = f"grpc://127.0.0.1:{port}"
        env["LANCE_FLIGHT_HEALTH_ARGS"] = ""
        check = subprocess.run(
            ["sh", "-c", health.replace("python ", f"{sys.executable} ", 1)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0 and check.stdout.startswith("healthy"), check
        assert '"datasets": 1' in check.stdout
    finally:
        server.terminate()
        server.wait(30)
