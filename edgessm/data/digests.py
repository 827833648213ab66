"""Content digests of files, remembered between runs: what a cache is keyed by when the files' modification
times cannot be trusted to say whether they changed.

A corpus copied, unpacked or mounted again has new modification times and the same bytes; a cache keyed by
modification times decodes it all again (minutes) and keeps a second copy on disk. :class:`FileDigests` keys
by the bytes instead, and reads a file only when its size or modification time differs from what its index
remembers, so an unchanged corpus costs one ``stat`` per file, and a copied one one read of each file (hashing
runs at disk speed, far faster than decoding audio).

The index is one JSON file (``{path: [size, mtime_ns, digest]}``), read once per process (:func:`index_at`) and
written atomically; a write keeps what other processes wrote before it (a digest lost to a race is only computed
again).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

#: bytes read per call while hashing
_BLOCK = 1 << 20


def file_digest(path: str | os.PathLike) -> str:
    """The BLAKE2b digest (16 bytes, hex) of the file's bytes."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


class FileDigests:
    """``digests.of(path)``: the digest of a file's bytes, from ``index`` while its size and modification time
    are the ones recorded there, else read and recorded. :meth:`save` writes the index if anything changed."""

    def __init__(self, index: str | os.PathLike) -> None:
        self.index = Path(index)
        self._known: dict[str, list] = {}
        self._changed = False
        try:
            known = json.loads(self.index.read_text())
            if isinstance(known, dict):
                self._known = known
        except (OSError, ValueError):
            pass  # no index yet, or one cut short: every file is read once more

    def of(self, path: str | os.PathLike, st: os.stat_result | None = None) -> str:
        """The digest of ``path``'s bytes (``st``: its ``os.stat``, when the caller has it)."""
        key = os.path.abspath(path)
        st = st if st is not None else os.stat(key)
        entry = self._known.get(key)
        if isinstance(entry, list) and len(entry) == 3 and entry[0] == st.st_size and entry[1] == st.st_mtime_ns:
            return str(entry[2])
        digest = file_digest(key)
        self._known[key] = [st.st_size, st.st_mtime_ns, digest]
        self._changed = True
        return digest

    def save(self) -> None:
        """Write the index (atomically: a temporary file renamed over it) when a digest was added or renewed."""
        if not self._changed:
            return
        self.index.parent.mkdir(parents=True, exist_ok=True)
        try:  # digests another process added since this one read the index are kept
            on_disk = json.loads(self.index.read_text())
            if isinstance(on_disk, dict):
                self._known = {**on_disk, **self._known}
        except (OSError, ValueError):
            pass
        fd, tmp = tempfile.mkstemp(prefix=f".{self.index.name}.", dir=self.index.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self._known, f, separators=(",", ":"))
            os.replace(tmp, self.index)
            self._changed = False
        except OSError:
            Path(tmp).unlink(missing_ok=True)  # a read-only or full cache: the digests are read again next time


@functools.lru_cache(maxsize=4)
def index_at(index: Path) -> FileDigests:
    """The process's one :class:`FileDigests` of ``index``: a training set's stores share it, so the index is read
    once, not once per store."""
    return FileDigests(index)
