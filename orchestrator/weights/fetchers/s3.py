"""`s3://bucket/prefix`: an object store bucket, with credentials through boto3 or anonymously over HTTPS.

With boto3 installed and AWS credentials found (its usual chain: environment, ~/.aws, an instance
role), objects are read by signed GetObject with a Range. Without either, a public bucket is read
anonymously over HTTPS at its virtual-hosted URL (`https://<bucket>.s3.amazonaws.com/<key>`), or
path-style under BERTH_S3_ENDPOINT when set (MinIO, R2, a mirror: `<endpoint>/<bucket>/<key>`); a
bucket that refuses an anonymous read is reported as needing credentials. BERTH_S3_ENDPOINT is
boto3's `endpoint_url` too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING
from urllib.parse import quote

import httpx

from ..files import CHUNK_BYTES, Revision, RevisionFile
from ._protocol import Transfer, TransferCut, WeightsFetchError
from .http import HttpFetcher

if TYPE_CHECKING:  # the stubs (boto3-stubs[s3]) are a dev dependency; boto3 itself is optional at run time
    from botocore.response import StreamingBody
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import GetObjectRequestTypeDef

ENDPOINT_ENV = "BERTH_S3_ENDPOINT"
_CONTENT_RANGE = re.compile(r"bytes (\d+)-\d+/(\d+)")


def parse_s3_origin(origin: str) -> tuple[str, str]:
    """(bucket, key prefix, without its trailing slash) of `s3://bucket[/prefix]`."""
    rest = origin.partition("://")[2]
    bucket, _, prefix = rest.partition("/")
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
        raise WeightsFetchError(f"{origin}: {bucket!r} is not an S3 bucket name")
    return bucket, prefix.strip("/")


def object_key(revision: Revision, file: RevisionFile) -> tuple[str, str]:
    bucket, prefix = parse_s3_origin(revision.origin)
    return bucket, f"{prefix}/{file.path}" if prefix else file.path


def _boto3_credentials() -> S3Client | None:
    """boto3's S3 client when boto3 is installed and finds credentials; None to read anonymously."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        return None
    session = boto3.session.Session()
    if session.get_credentials() is None:
        return None
    endpoint = os.environ.get(ENDPOINT_ENV) or None
    config = Config(s3={"addressing_style": "path"} if endpoint else {}, retries={"max_attempts": 2})
    return session.client("s3", endpoint_url=endpoint, config=config)


class S3Fetcher(HttpFetcher):
    """Objects under `s3://bucket/prefix`, one per revision file."""

    def __init__(self, client: S3Client | None = None, use_boto3: bool = True) -> None:
        super().__init__()
        self._s3 = client if client is not None else (_boto3_credentials() if use_boto3 else None)

    def url_of(self, revision: Revision, file: RevisionFile) -> str:
        bucket, key = object_key(revision, file)
        return f"s3://{bucket}/{key}"

    def request_url(self, revision: Revision, file: RevisionFile) -> str:
        bucket, key = object_key(revision, file)
        endpoint = os.environ.get(ENDPOINT_ENV)
        if endpoint:
            return f"{endpoint.rstrip('/')}/{bucket}/{quote(key)}"
        return f"https://{bucket}.s3.amazonaws.com/{quote(key)}"

    def refusal(self, response: httpx.Response) -> str:
        if response.status_code in (401, 403):
            how = (
                "install boto3 and give AWS credentials (environment, ~/.aws or an instance role)"
                if not _has_boto3()
                else "give AWS credentials (environment, ~/.aws or an instance role)"
            )
            return f"the bucket does not allow anonymous reads: {how}; {response.request.url}"
        return str(response.request.url)

    @contextmanager
    def open(self, revision: Revision, file: RevisionFile, offset: int) -> Iterator[Transfer]:
        if self._s3 is None:
            with super().open(revision, file, offset) as transfer:
                yield transfer
            return
        with self._signed(self._s3, revision, file, offset) as transfer:
            yield transfer

    @contextmanager
    def _signed(self, s3: S3Client, revision: Revision, file: RevisionFile, offset: int) -> Iterator[Transfer]:
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, key = object_key(revision, file)
        named = self.url_of(revision, file)
        args: GetObjectRequestTypeDef = {"Bucket": bucket, "Key": key}
        if offset:
            args["Range"] = f"bytes={offset}-"
        try:
            answer = s3.get_object(**args)
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            code = exc.response.get("Error", {}).get("Code", "")
            if status == 416 or code == "InvalidRange":
                yield Transfer(offset, None, iter(()))
                return
            if status >= 500:
                raise TransferCut(f"{named}: HTTP {status} {code}") from exc
            raise WeightsFetchError(f"{named}: HTTP {status} {code}".rstrip()) from exc
        except BotoCoreError as exc:
            raise TransferCut(f"cannot reach {named}: {exc}") from exc
        match = _CONTENT_RANGE.fullmatch(answer.get("ContentRange") or "")
        start, total = (int(match.group(1)), int(match.group(2))) if match else (0, answer.get("ContentLength"))
        body = answer["Body"]
        try:
            yield Transfer(start, total, _body_chunks(body, named))
        finally:
            body.close()


def _body_chunks(body: StreamingBody, named: str) -> Iterator[bytes]:
    from botocore.exceptions import BotoCoreError

    try:
        yield from body.iter_chunks(CHUNK_BYTES)
    except (BotoCoreError, OSError) as exc:
        raise TransferCut(f"{named}: cut after part of the object: {exc}") from exc


def _has_boto3() -> bool:
    import importlib.util

    return importlib.util.find_spec("boto3") is not None
