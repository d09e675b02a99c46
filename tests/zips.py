"""Zips built in memory for the upload tests (a test split, a model folder)."""
import stat
import zipfile
from io import BytesIO


def zipped(members: dict, links=()) -> bytes:
    """A zip of {name: bytes} (deflated); the names in ``links`` stored as symbolic links."""
    buffer = BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, raw in members.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            if name in links:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, raw)
    return buffer.getvalue()
