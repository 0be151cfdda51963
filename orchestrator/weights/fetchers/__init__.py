"""Where a node's real weights come from: one small protocol, one class per kind of source.

    fetcher = origin_fetcher(revision)              # by the origin's scheme: file, package, http(s), hf, s3
    with fetcher.open(revision, file, offset) as transfer:
        for chunk in transfer.chunks: ...           # bytes from transfer.start on (0 when it cannot resume)

A fetcher only moves bytes. Writing them, resuming a cut transfer, hashing, refusing a file that
is not the catalogue's and fetching it again is `orchestrator.node.weights_fill`'s, the same for
every source; so a new source (a datacenter peer) is one class implementing `WeightsFetcher`.
"""

from ..files import Revision
from ._protocol import LocalSource, SourceTier, Transfer, TransferCut, WeightsFetcher, WeightsFetchError, origin_url
from .hf import HfFetcher
from .http import HttpFetcher, http_transfer
from .local import FileFetcher, PackageFetcher
from .s3 import S3Fetcher


def origin_fetcher(revision: Revision) -> WeightsFetcher:
    """The fetcher for `revision`'s origin, by its scheme."""
    scheme = revision.origin.partition("://")[0]
    if scheme == "file":
        return FileFetcher()
    if scheme == "package":
        return PackageFetcher()
    if scheme in ("http", "https"):
        return HttpFetcher()
    if scheme == "hf":
        return HfFetcher()
    if scheme == "s3":
        return S3Fetcher()
    raise WeightsFetchError(f"{revision.origin}: no fetcher for scheme {scheme!r}")


__all__ = [
    "FileFetcher",
    "HfFetcher",
    "HttpFetcher",
    "LocalSource",
    "PackageFetcher",
    "S3Fetcher",
    "SourceTier",
    "Transfer",
    "TransferCut",
    "WeightsFetchError",
    "WeightsFetcher",
    "http_transfer",
    "origin_fetcher",
    "origin_url",
]
