"""A real S3 (and DynamoDB) server for the storage tests: moto's server in a subprocess on
127.0.0.1 with a free port, one per session; each test gets its own bucket."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

START_TIMEOUT = 60
KEY, SECRET, REGION = "testing", "testing", "us-east-1"


@dataclass
class MotoServer:
    endpoint: str

    @property
    def options(self) -> dict[str, str]:
        """pylance's storage option names, understood by both implementations."""
        return {
            "endpoint": self.endpoint,
            "allow_http": "true",
            "aws_access_key_id": KEY,
            "aws_secret_access_key": SECRET,
            "region": REGION,
        }

    @property
    def env(self) -> dict[str, str]:
        """The same configuration as the standard AWS environment variables."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def client(self, service: str = "s3"):
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
            region_name=REGION,
        )

    def new_bucket(self) -> str:
        name = f"t-{uuid.uuid4().hex[:20]}"
        self.client().create_bucket(Bucket=name)
        return name

    def new_ddb_table(self) -> str:
        """A DynamoDB table laid out as pylance's external manifest store expects."""
        name = f"t{uuid.uuid4().hex[:12]}"
        ddb = self.client("dynamodb")
        ddb.create_table(
            TableName=name,
            KeySchema=[
                {"AttributeName": "base_uri", "KeyType": "HASH"},
                {"AttributeName": "version", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "base_uri", "AttributeType": "S"},
                {"AttributeName": "version", "AttributeType": "N"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        return name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def start_moto(log_path: str) -> Iterator[MotoServer]:
    """moto's S3 + DynamoDB server on 127.0.0.1 with a free port (a subprocess: its own
    GIL), until the block ends."""
    port = _free_port()
    with open(log_path, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                with open(log_path) as f:
                    raise RuntimeError(f"moto did not start:\n{f.read()}") from None
            time.sleep(0.2)
    try:
        yield MotoServer(endpoint)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    with start_moto(str(tmp_path_factory.mktemp("moto") / "moto.log")) as server:
        yield server


@pytest.fixture
def s3_root(moto_server: MotoServer) -> str:
    """A fresh, empty bucket as ``s3://bucket``."""
    return f"s3://{moto_server.new_bucket()}"
