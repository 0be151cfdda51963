"""`hf://org/model@rev`: a Hugging Face Hub repository at a revision, through huggingface_hub.

huggingface_hub resolves each file to its URL (`hf_hub_url`: `<endpoint>/<org>/<model>/resolve/<rev>/<path>`,
the endpoint from HF_ENDPOINT, so a mirror or a test server can stand in) and builds the request headers
(`build_hf_headers`: the token from HF_TOKEN or `huggingface-cli login`). The bytes then go through the
same resumable HTTP transfer as any origin, straight into the cache: `hf_hub_download` would keep a second
copy in its own cache and could not be hashed and refused like every other source.
"""

from __future__ import annotations

import os

import httpx

from ..files import Revision, RevisionFile
from ._protocol import WeightsFetchError
from .http import HttpFetcher


def parse_hf_origin(origin: str, revision: str) -> tuple[str, str]:
    """(repo_id, revision) of `hf://org/model[@rev]`; the @rev in the URL wins over the entry's `revision`."""
    rest = origin.partition("://")[2].strip("/")
    repo_id, at, rev = rest.partition("@")
    if repo_id.count("/") != 1 or not all(repo_id.split("/")) or (at and not rev):
        raise WeightsFetchError(f"{origin}: an hf:// origin is hf://org/model or hf://org/model@revision")
    return repo_id, rev or revision


class HfFetcher(HttpFetcher):
    """Files of a Hub repository at one revision (pin a commit sha: a branch such as main moves)."""

    def url_of(self, revision: Revision, file: RevisionFile) -> str:
        return f"{revision.origin.rstrip('/')}/{file.path}"

    def request_url(self, revision: Revision, file: RevisionFile) -> str:
        from huggingface_hub import constants, hf_hub_url

        repo_id, rev = parse_hf_origin(revision.origin, revision.revision)
        endpoint = os.environ.get("HF_ENDPOINT") or constants.ENDPOINT
        return hf_hub_url(repo_id, file.path, revision=rev, endpoint=endpoint.rstrip("/"))

    def headers(self, revision: Revision, file: RevisionFile) -> dict[str, str]:
        from huggingface_hub.utils import build_hf_headers

        token = os.environ.get("HF_TOKEN") or None  # None: huggingface_hub's own lookup (the login file)
        return {**build_hf_headers(token=token, library_name="berth"), **super().headers(revision, file)}

    def refusal(self, response: httpx.Response) -> str:
        code = response.headers.get("x-error-code", "")
        url = str(response.request.url)
        if response.status_code in (401, 403):
            hint = "the repository is gated or private: set HF_TOKEN to a token that may read it"
        elif code == "RevisionNotFound":
            hint = "no such revision"
        elif code == "EntryNotFound":
            hint = "no such file at this revision"
        elif response.status_code == 404:
            hint = "no such repository, revision or file"
        else:
            hint = ""
        return "; ".join(p for p in (code, hint, url) if p)
