"""Audio inputs read a block at a time (constant memory for hours of audio), torch-free.

``open_source(name)`` opens a path or ``-`` (stdin) and checks it holds audio; ``source.blocks(n)``
yields ``(channels, n)`` float32 blocks and refuses non-finite samples with advice. libsndfile's
formats (wav, flac, ogg, mp3, aiff, ...) stream; anything else librosa can decode is read whole.
"""

from __future__ import annotations

import io
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np


class Source:
    """An input opened for block reads: soundfile when it can (stdin too), else decoded whole by librosa."""

    def __init__(self, name: str, rate: int, channels: int, frames: int, fmt: str | None, subtype: str | None,
                 sound_file=None, data: np.ndarray | None = None) -> None:  # fmt: skip
        self.name, self.rate, self.channels, self.frames = name, rate, channels, frames
        self.format, self.subtype = fmt, subtype
        self._sf, self._data = sound_file, data

    @property
    def seconds(self) -> float:
        return self.frames / self.rate

    def blocks(self, size: int) -> Iterator[np.ndarray]:
        """``(channels, n)`` float32 blocks; raises :class:`AudioError` at a non-finite sample."""
        from edgessm.data.audio import AudioError

        pos = 0
        while True:
            if self._sf is not None:
                try:
                    block = self._sf.read(size, dtype="float32", always_2d=True).T
                except RuntimeError as e:  # soundfile.LibsndfileError: a damaged stream
                    raise AudioError(f"{self.name}: cannot decode past {pos / self.rate:.2f} s ({e})") from None
            else:
                block = self._data[:, pos : pos + size]
            if not block.shape[1]:
                return
            if not np.isfinite(block).all():
                at = pos + int(np.flatnonzero(~np.isfinite(block).all(axis=0))[0])
                raise AudioError(
                    f"{self.name}: NaN or infinite sample at {at / self.rate:.3f} s; the recording is damaged "
                    "(or float audio gone wrong): repair or re-export it, e.g. as 16-bit PCM wav, and try again"
                )
            pos += block.shape[1]
            yield block

    def close(self) -> None:
        if self._sf is not None:
            self._sf.close()


def open_source(name: str) -> Source:
    """Open ``name`` (a path or ``-`` for stdin) and check it holds audio; raise :class:`AudioError` if not."""
    import soundfile as sf

    from edgessm.data.audio import AudioError, load_audio

    if name == "-":
        data = sys.stdin.buffer.read()
        if not data:
            raise AudioError("stdin is empty: pipe a wav or flac stream in (or give a file as IN)")
        try:
            f = sf.SoundFile(io.BytesIO(data))
        except (RuntimeError, TypeError) as e:
            raise AudioError(f"stdin is not a wav/flac/ogg stream ({e}); pipe wav or flac in, or give IN") from None
        source = Source("stdin", f.samplerate, f.channels, f.frames, f.format, f.subtype, sound_file=f)
    else:
        path = Path(name)
        if path.is_dir():
            raise AudioError(f"{path} is a folder, not an audio file")
        if not path.exists():
            raise AudioError(f"{path}: no such file")
        if not os.access(path, os.R_OK):
            raise AudioError(f"{path}: permission denied (cannot read it)")
        try:
            f = sf.SoundFile(str(path))
        except (RuntimeError, TypeError):  # not something libsndfile reads: decode it whole (mp4, aac, ...)
            with warnings.catch_warnings():  # librosa's fallback chatter; failures raise AudioError with advice
                warnings.simplefilter("ignore")
                audio, rate = load_audio(path, sr=None, mono=False)
            return Source(str(path), rate, audio.shape[0], audio.shape[1], None, None, data=audio)
        source = Source(str(path), f.samplerate, f.channels, f.frames, f.format, f.subtype, sound_file=f)
    if source.frames <= 0:
        source.close()
        raise AudioError(f"{source.name}: the file holds no samples")
    return source
