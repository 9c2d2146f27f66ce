"""Which module moves data from one URL scheme to another."""

from __future__ import annotations

from collections.abc import Mapping

from stork.transfer.base import TransferModule
from stork.transfer.external import discover
from stork.transfer.gfal import GfalModule
from stork.transfer.gridftp import GridFtpModule
from stork.transfer.local import FileModule, HttpModule
from stork.urls import parse_url

FTP_SCHEMES = ("ftp", "gsiftp")
# XRootD and HTTPS/WebDAV: gfal2's copy, to and from each other, local disk and GridFTP
GFAL_SCHEMES = ("root", "xroot", "davs", "dav", "https")


def through_gfal(src_url: str, dest_url: str) -> bool:
    """Whether a dataset's file goes through gfal2's copy (either end XRootD or
    HTTPS/WebDAV) rather than globus-url-copy."""
    return any(parse_url(url).scheme in GFAL_SCHEMES for url in (src_url, dest_url))


class Registry:
    """Modules keyed by (source scheme, destination scheme); external ones win."""

    def __init__(self, modules: Mapping[tuple[str, str], TransferModule]) -> None:
        self._modules = dict(modules)

    @classmethod
    def default(cls, module_dir: str = "", globus_url_copy: str = "globus-url-copy") -> Registry:
        gridftp = GridFtpModule(globus_url_copy)
        modules: dict[tuple[str, str], TransferModule] = {("file", "file"): FileModule()}
        for a in FTP_SCHEMES:
            for b in (*FTP_SCHEMES, "file"):
                modules[(a, b)] = gridftp
                modules[(b, a)] = gridftp
        modules[("http", "file")] = HttpModule()
        gfal = GfalModule()
        for a in GFAL_SCHEMES:
            for b in (*GFAL_SCHEMES, "file", "gsiftp"):
                modules[(a, b)] = gfal
                modules[(b, a)] = gfal
        modules.update(discover(module_dir))
        return cls(modules)

    def find(self, src_scheme: str, dest_scheme: str) -> TransferModule | None:
        return self._modules.get((src_scheme.lower(), dest_scheme.lower()))

    def pairs(self) -> list[tuple[str, str]]:
        return sorted(self._modules)
