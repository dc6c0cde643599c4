"""Build the krew archive of ``kubectl sits``: ``python deploy/krew/archive.py [OUT_DIR]``.

The archive is a zip (krew takes ``.zip`` and ``.tar.gz``) holding only the launcher
``kubectl-sits`` (next to this file), stored uncompressed with its timestamp and mode fixed,
so the same launcher gives the same bytes with any zlib, and the
``sha256`` in ``sits.yaml`` can be checked by a test (tests/unit/test_krew_manifest.py) and
reproduced by whoever uploads the release. Prints the archive's path and its SHA-256.
"""

from __future__ import annotations

import hashlib
import io
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAUNCHER = HERE / "kubectl-sits"
ARCHIVE = "kubectl-sits.zip"


def archive_bytes() -> bytes:
    """The zip of the launcher, byte for byte the same on every machine."""
    info = zipfile.ZipInfo(LAUNCHER.name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.create_system = 3  # Unix, so that krew keeps the mode below
    info.external_attr = (0o100755 & 0xFFFF) << 16  # a regular file, rwxr-xr-x
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, mode="w") as out:
        out.writestr(info, LAUNCHER.read_bytes())
    return packed.getvalue()


def main(argv: list[str]) -> None:
    """Write the archive into ``argv[0]`` (default: the current folder)."""
    folder = Path(argv[0]) if argv else Path.cwd()
    path = folder / ARCHIVE
    data = archive_bytes()
    path.write_bytes(data)
    print(f"{path} sha256 {hashlib.sha256(data).hexdigest()}")


if __name__ == "__main__":
    main(sys.argv[1:])
