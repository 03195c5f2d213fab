"""The DynamoDB external manifest store, with pylance's table layout so both can commit to
one ``s3+ddb://`` dataset: hash key ``base_uri`` (S), range key ``version`` (N), attributes
``path`` (S), ``size`` (N) and ``committer`` (S).  Every read is strongly consistent.

The endpoint comes from the ``dynamodb_endpoint`` storage option or ``DYNAMODB_ENDPOINT``
(as in pylance); credentials and region from the S3 options or the ``AWS_*`` variables."""

from __future__ import annotations

import os

from ..errors import InvalidArgumentError, LanceIOError
from .commit import ExternalManifestStore

COMMITTER = "lance-flight"


class DynamoDBManifestStore(ExternalManifestStore):
    def __init__(self, table: str, options: dict[str, str]):
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:  # boto3 is an optional dependency
            raise InvalidArgumentError(
                "s3+ddb:// datasets need boto3 (pip install 'lance-flight[dynamodb]')"
            ) from exc
        lowered = {str(k).lower(): str(v) for k, v in options.items()}

        def pick(*names: str) -> str | None:
            return next((lowered[n] for n in names if n in lowered), None)

        endpoint = pick("dynamodb_endpoint") or os.environ.get("DYNAMODB_ENDPOINT")
        region = pick("region", "aws_region") or os.environ.get("AWS_REGION") or "us-east-1"
        self.table = table
        self._client = boto3.client(
            "dynamodb",
            endpoint_url=endpoint,
            region_name=region,
            aws_access_key_id=pick("aws_access_key_id", "access_key_id"),
            aws_secret_access_key=pick("aws_secret_access_key", "secret_access_key"),
            aws_session_token=pick("aws_session_token", "session_token", "token"),
            config=Config(retries={"max_attempts": 5, "mode": "standard"}),
        )
        self._conditional_failed = self._client.exceptions.ConditionalCheckFailedException

    def _put(self, base: str, version: int, path: str, size: int, condition: str) -> bool:
        try:
            self._client.put_item(
                TableName=self.table,
                Item={
                    "base_uri": {"S": base},
                    "version": {"N": str(version)},
                    "path": {"S": path},
                    "size": {"N": str(size)},
                    "committer": {"S": COMMITTER},
                },
                ConditionExpression=condition,
            )
        except self._conditional_failed:
            return False
        except Exception as exc:
            raise LanceIOError(f"DynamoDB table {self.table}: {exc}") from exc
        return True

    def put_if_not_exists(self, base: str, version: int, path: str, size: int) -> bool:
        return self._put(
            base,
            version,
            path,
            size,
            "attribute_not_exists(base_uri) AND attribute_not_exists(version)",
        )

    def put_if_exists(self, base: str, version: int, path: str, size: int) -> None:
        if not self._put(
            base, version, path, size, "attribute_exists(base_uri) AND attribute_exists(version)"
        ):
            raise LanceIOError(
                f"DynamoDB table {self.table} has no entry for version {version} of {base}"
            )

    def get_latest(self, base: str) -> tuple[int, str] | None:
        try:
            found = self._client.query(
                TableName=self.table,
                KeyConditionExpression="base_uri = :b",
                ExpressionAttributeValues={":b": {"S": base}},
                ScanIndexForward=False,
                Limit=1,
                ConsistentRead=True,
            )
        except Exception as exc:
            raise LanceIOError(f"DynamoDB table {self.table}: {exc}") from exc
        items = found.get("Items") or []
        if not items:
            return None
        item = items[0]
        return int(item["version"]["N"]), item["path"]["S"]
