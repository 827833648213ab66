"""Audio inputs read a block at a time (constant memory for hours of audio), torch-free.

``open_source(name)`` opens a path or ``-`` (stdin) and checks it holds audio; ``source.blocks(n)``
yields ``(channels, n)`` float32 blocks and refuses non-finite samples with advice. libsndfile's
formats (wav, flac, ogg, mp3, aiff, ...) stream; anything else librosa can decode is read whole.

On stdin a 16-bit PCM wav stream (its length in the header, or the "unknown" placeholder that
streaming writers put there) is read a block at a time as it arrives, in constant memory however
long it runs. Anything else on stdin (FLAC, Ogg, MP3, other wav sample formats) is read whole into
memory first, because libsndfile has to seek in it.

``PcmPipe`` reads a live byte stream (``edgessm listen --input -``): raw 16-bit PCM, or a 16-bit
PCM wav stream, a block at a time as it arrives.
"""

from __future__ import annotations

import io
import math
import os
import struct
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

PROBE_BYTES = 4096  # bytes looked at to tell text or a container from audio
MAX_HEADER_BYTES = 1 << 20  # a wav stream's chunks before its samples: more is not a wav header
SAMPLE_RATE = 16000  # what a PcmPipe assumes until a wav header says otherwise
UNKNOWN_SIZE = 0x7F000000  # wav data sizes from here up are streaming writers' "length unknown" placeholders
CONTAINERS = {b"RIFF": "wav", b"RIFX": "big-endian wav (RIFX)", b"RF64": "RF64 wav", b"fLaC": "FLAC",
              b"OggS": "Ogg", b"ID3": "MP3", b"FORM": "AIFF", b"caff": "CAF"}  # fmt: skip
WAV_PCM, WAV_EXTENSIBLE = 1, 0xFFFE


class Source:
    """An input opened for block reads: soundfile when it can (stdin too), a :class:`PcmPipe` for a 16-bit
    wav stream on stdin, else decoded whole by librosa.

    ``frames`` is ``None`` for a stream whose header leaves its length open (known only at its end); for
    a stream it is what the header promises, checked when the stream ends."""

    def __init__(self, name: str, rate: int, channels: int, frames: int | None, fmt: str | None,
                 subtype: str | None, sound_file=None, data: np.ndarray | None = None,
                 pipe: PcmPipe | None = None) -> None:  # fmt: skip
        self.name, self.rate, self.channels, self.frames = name, rate, channels, frames
        self.format, self.subtype = fmt, subtype
        self._sf, self._data, self._pipe = sound_file, data, pipe

    @property
    def streaming(self) -> bool:
        """Read from a pipe as it arrives (its length checked only at its end)."""
        return self._pipe is not None

    @property
    def seconds(self) -> float | None:
        return None if self.frames is None else self.frames / self.rate

    def blocks(self, size: int) -> Iterator[np.ndarray]:
        """``(channels, n)`` float32 blocks, ``n <= size``; raises :class:`AudioError` at a non-finite sample."""
        from edgessm.data.audio import AudioError

        if self._pipe is not None:
            yield from self._pipe_blocks(size)
            return
        pos = 0
        while True:
            if self._sf is not None:
                try:
                    block = self._sf.read(size, dtype="float32", always_2d=True).T
                except RuntimeError as e:  # soundfile.LibsndfileError: a damaged stream
                    raise AudioError(
                        f"{self.name}: cannot decode past {pos / self.rate:.2f} s ({_reason(e)}); it is cut short "
                        "or damaged: copy or export it again whole"
                    ) from None
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

    def _pipe_blocks(self, size: int) -> Iterator[np.ndarray]:
        """The blocks of a wav stream, exactly ``size`` frames each but the last (as libsndfile gives them):
        at most one block and one read of the pipe in memory. Raises :class:`AudioError` at the end if the
        stream holds fewer frames than its header promises; a partial frame at the end of a stream of
        unknown length is dropped, as libsndfile does."""
        from edgessm.data.audio import AudioError

        pipe, frame = self._pipe, 2 * self.channels
        want, pending, frames = max(1, size) * frame, bytearray(), 0
        for data in pipe.raw_blocks():
            pending += data
            while len(pending) >= want:
                block = pcm16_frames(bytes(pending[:want]), self.channels)
                del pending[:want]
                frames += block.shape[1]
                yield block
        held = frames + len(pending) // frame
        if self.frames is not None and held < self.frames:
            raise AudioError(_ends_early(self.name, self.frames, held, self.rate))
        if pending:
            yield pcm16_frames(bytes(pending), self.channels)

    def close(self) -> None:
        if self._sf is not None:
            self._sf.close()


def open_source(name: str) -> Source:
    """Open ``name`` (a path or ``-`` for stdin) and check it holds audio; raise :class:`AudioError` if not."""
    source, head = _open_stdin() if name == "-" else _open_file(Path(name))
    _check_whole(source, head)
    return source


def _open_file(path: Path) -> tuple[Source, bytes]:
    """``path`` as a :class:`Source` (streamed by libsndfile, else decoded whole by librosa), and its first bytes."""
    import soundfile as sf

    from edgessm.data.audio import AudioError, empty_file, load_audio

    if path.is_dir():
        raise AudioError(f"{path} is a folder, not an audio file")
    if not path.exists():
        raise AudioError(f"{path}: no such file (check the path)")
    if not os.access(path, os.R_OK):
        raise AudioError(f"{path}: permission denied (cannot read it)")
    with open(path, "rb") as file:
        head = file.read(PROBE_BYTES)
    if not head:
        raise empty_file(path)
    try:
        f = sf.SoundFile(str(path))
    except (RuntimeError, TypeError):  # not something libsndfile reads: decode it whole (mp4, aac, ...)
        if looks_like_text(head):
            raise AudioError(f"{path}: not a readable audio file (it holds text); convert it to wav or flac") from None
        with warnings.catch_warnings():  # librosa's fallback chatter; failures raise AudioError with advice
            warnings.simplefilter("ignore")
            audio, rate = load_audio(path, sr=None, mono=False)
        return Source(str(path), rate, audio.shape[0], audio.shape[1], None, None, data=audio), head
    return Source(str(path), f.samplerate, f.channels, f.frames, f.format, f.subtype, sound_file=f), head


def _open_stdin() -> tuple[Source, bytes]:
    """stdin as a :class:`Source`, and its first bytes: a 16-bit PCM wav stream read as it arrives (see
    :func:`_wav_stream`), anything else read whole (a pipe cannot seek, as libsndfile needs)."""
    stdin = sys.stdin.buffer
    head = read_fully(stdin, 12)
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        pipe = _Rewind(head, stdin)
        source = _wav_stream(pipe)
        if source is not None:
            return source, head
        head = pipe.rewound()
    return _open_whole(head + stdin.read())


def _wav_stream(pipe: _Rewind) -> Source | None:
    """A 16-bit PCM wav stream as a streaming :class:`Source` (refused at once, with the message a whole
    read gives, when it holds no samples); ``None`` when it is not one (another sample format, a header
    cut off or damaged): the caller reads it whole, and libsndfile has the last word on it."""
    from edgessm.data.audio import AudioError

    try:
        stream = PcmPipe(pipe, SAMPLE_RATE, "stdin")
    except AudioError:
        return None
    frames = None if stream.promised is None else stream.promised // (2 * stream.channels)
    if frames == 0 or not stream.has_samples():
        raise AudioError("stdin: the file holds no samples; record or export it again")
    pipe.forget()
    return Source("stdin", stream.rate, stream.channels, frames, "WAV", "PCM_16", pipe=stream)


class _Rewind:
    """A pipe with ``head`` (bytes already taken from it) given back in front, that keeps what it hands
    out until :meth:`forget`: :meth:`rewound` is all of it for a reader that gave up on the stream."""

    def __init__(self, head: bytes, pipe: BinaryIO) -> None:
        self.pipe, self._ahead, self._kept = pipe, head, bytearray()
        self._keep = True

    def read(self, n: int) -> bytes:
        if self._ahead:
            data, self._ahead = self._ahead[:n], self._ahead[n:]
        else:
            data = self.pipe.read(n)
        if self._keep:
            self._kept += data
        return data

    def rewound(self) -> bytes:
        """The bytes handed out so far and those not yet handed out: the stream from its start."""
        return bytes(self._kept) + self._ahead

    def forget(self) -> None:
        self._keep, self._kept = False, bytearray()


def _open_whole(data: bytes) -> tuple[Source, bytes]:
    """``data``, all of stdin, as a :class:`Source` read by libsndfile, and its first bytes."""
    import soundfile as sf

    from edgessm.data.audio import AudioError

    if not data:
        raise AudioError("stdin is empty: pipe a wav or flac stream in (or give a file as IN)")
    try:
        f = sf.SoundFile(io.BytesIO(data))
    except (RuntimeError, TypeError) as e:
        kind = container_of(data)
        if kind is not None:  # a container libsndfile knows but cannot read: cut off or damaged (or mp3 in ID3)
            raise AudioError(
                f"stdin: a {kind} stream that cannot be read ({_reason(e)}); it is cut off or damaged, "
                "or not wav/flac/ogg: pipe the whole stream as wav or flac"
            ) from None
        why = "it holds text" if looks_like_text(data[:PROBE_BYTES]) else _reason(e)
        raise AudioError(f"stdin is not a wav/flac/ogg stream ({why}); pipe wav or flac in, or give IN") from None
    return Source("stdin", f.samplerate, f.channels, f.frames, f.format, f.subtype, sound_file=f), data[:PROBE_BYTES]


def _check_whole(source: Source, head: bytes) -> None:
    """Refuse (and close) a source without samples, or a wav file whose header promises more than it holds."""
    from edgessm.data.audio import AudioError

    if source.streaming:  # checked as it is read: it holds samples (see _wav_stream), its length at its end
        return
    promised = wav_frames(head) if source.format == "WAV" else None
    if source.frames <= 0:
        source.close()
        raise AudioError(f"{source.name}: the file holds no samples; record or export it again")
    if promised is not None and promised > source.frames:
        source.close()
        raise AudioError(_ends_early(source.name, promised, source.frames, source.rate))


def _ends_early(name: str, promised: int, held: int, rate: int) -> str:
    return (
        f"{name} ends early: its header promises {promised / rate:.2f} s of audio but it holds {held / rate:.2f} s "
        "(cut off while being copied, downloaded or piped); "
        + ("send the whole stream" if name == "stdin" else "get the whole file again")
    )


def _reason(e: Exception) -> str:
    """libsndfile's reason, without the ``Error opening <object at 0x...>:`` prefix."""
    text = str(e)
    return text.split(">: ", 1)[1] if ">: " in text else text


def looks_like_text(head: bytes) -> bool:
    """Whether ``head``, the first bytes of an input, is text (UTF-8 of printable characters and whitespace).
    Audio samples are not: they hold control bytes, zeros and invalid UTF-8 within a few samples."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 3:  # not just a character cut at the end of the probe
            return False
        text = head[: e.start].decode("utf-8")
    text = "".join(text.split())
    return bool(text) and text.isprintable()


def container_of(head: bytes) -> str | None:
    """The container the first bytes of an input announce (``wav``, ``FLAC``, ``Ogg``, ...), or ``None``."""
    return next((name for magic, name in CONTAINERS.items() if head.startswith(magic)), None)


def wav_chunks(head: bytes) -> Iterator[tuple[bytes, int, int]]:
    """The chunks of a RIFF/WAVE header in ``head``: ``(id, offset of its payload, payload size)``; the
    walk ends at the ``data`` chunk or at the end of ``head``."""
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return
    pos = 12
    while pos + 8 <= len(head):
        cid, size = head[pos : pos + 4], int.from_bytes(head[pos + 4 : pos + 8], "little")
        yield cid, pos + 8, size
        if cid == b"data":
            return
        pos += 8 + size + (size & 1)


def wav_frames(head: bytes) -> int | None:
    """Frames a wav file's header promises (its ``data`` size over the frame size), or ``None`` when
    ``head`` does not reach the ``data`` chunk, the samples are compressed, or the size is a placeholder."""
    align = None
    for cid, at, size in wav_chunks(head):
        if cid == b"fmt " and size >= 16 and at + 16 <= len(head):
            tag, align = struct.unpack_from("<H", head, at)[0], struct.unpack_from("<H", head, at + 12)[0]
            if tag not in (WAV_PCM, 3, 6, 7, WAV_EXTENSIBLE):  # PCM, float, A-law, mu-law: fixed frame size
                return None
        elif cid == b"data":
            return size // align if align and 0 < size < UNKNOWN_SIZE else None
    return None


# --- a live byte stream: raw 16-bit PCM or a 16-bit wav stream ---------------------------------------------------


def read_fully(pipe: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes of ``pipe``, fewer only at its end (a pipe may hand out less per read)."""
    pieces, got = [], 0
    while got < n and (piece := pipe.read(n - got)):
        pieces.append(piece)
        got += len(piece)
    return b"".join(pieces)


class PcmPipe:
    """16-bit little-endian PCM arriving on a pipe: raw (``rate`` Hz, mono), or a wav stream (its header
    gives the rate and channels, which are averaged). Refuses text and other containers when opened.

    Args:
        pipe: a binary stream (``sys.stdin.buffer``).
        rate: the rate of raw PCM.
        name: what the messages call the stream.
    """

    def __init__(self, pipe: BinaryIO, rate: int, name: str = "stdin") -> None:
        from edgessm.data.audio import AudioError

        self.pipe, self.name, self.rate, self.channels = pipe, name, int(rate), 1
        self.promised: int | None = None  # bytes of samples a wav header promises
        self._head = read_fully(pipe, max(1, self.rate // 10) * 2)
        how = ("pipe raw 16-bit little-endian mono PCM at --rate Hz, or a 16-bit wav stream "
               "(e.g. sox IN -t wav -e signed -b 16 -), or give --input FILE")  # fmt: skip
        if not self._head:
            raise AudioError(f"{name} is empty: {how}")
        if looks_like_text(self._head[:PROBE_BYTES]):
            raise AudioError(f"{name} holds text, not audio: {how}")
        kind = container_of(self._head)
        if kind == "wav":
            self._head += read_fully(pipe, 12 - len(self._head)) if len(self._head) < 12 else b""
            if self._head[8:12] != b"WAVE":
                raise AudioError(f"{name} holds a RIFF stream that is not wav audio: {how}")
            self._read_wav_header()
        elif kind is not None:
            raise AudioError(f"{name} holds a {kind} stream, which listen cannot decode from a pipe: {how}")

    def _read_wav_header(self) -> None:
        """Take the rate and channels from the wav header at the start of the stream (16-bit PCM only)."""
        from edgessm.data.audio import AudioError

        head, chunks = self._header_chunks()
        fmt = None
        for cid, at, size in chunks:
            if cid == b"fmt " and size >= 16:
                fmt = struct.unpack_from("<HHIIHH", head, at)  # tag, channels, rate, bytes/s, frame bytes, bits
                if fmt[0] == WAV_EXTENSIBLE and size >= 26:  # the tag is the first field of its sub-format
                    fmt = (struct.unpack_from("<H", head, at + 24)[0], *fmt[1:])
        if fmt is None or fmt[0] != WAV_PCM or fmt[5] != 16 or not fmt[1] or not fmt[2]:
            what = "no format chunk" if fmt is None else f"{fmt[5]}-bit {fmt[1]}-channel samples (format tag {fmt[0]})"
            raise AudioError(
                f"{self.name}: a wav stream of {what}; listen reads 16-bit PCM from a pipe: convert it "
                "(e.g. sox IN -t wav -e signed -b 16 -) or give --input FILE"
            )
        self.channels, self.rate = fmt[1], fmt[2]
        data_at, size = chunks[-1][1], chunks[-1][2]
        self.promised = size if 0 < size < UNKNOWN_SIZE else None
        self._head = head[data_at:]

    def _header_chunks(self) -> tuple[bytes, list[tuple[bytes, int, int]]]:
        """Read the stream up to its ``data`` chunk: ``(the bytes read, their chunks as wav_chunks gives them)``."""
        from edgessm.data.audio import AudioError

        head = self._head
        while True:
            chunks = list(wav_chunks(head))
            last = chunks[-1] if chunks else None
            if last is not None and last[0] == b"data":
                return head, chunks
            need = len(head) + 8 if last is None else last[1] + last[2] + (last[2] & 1) + 8  # the next chunk's header
            if need > MAX_HEADER_BYTES:
                raise AudioError(f"{self.name}: a damaged wav stream (no samples in its first 1 MB); send it again")
            more = read_fully(self.pipe, need - len(head))
            if not more:
                raise AudioError(f"{self.name} ended inside its wav header: send the whole stream")
            head += more

    def has_samples(self) -> bool:
        """Whether a whole frame follows the header (reads at most one frame more; nothing is lost)."""
        frame = 2 * self.channels
        if len(self._head) < frame:
            self._head += read_fully(self.pipe, frame - len(self._head))
        return len(self._head) >= frame

    def raw_blocks(self, limit: float = math.inf) -> Iterator[bytes]:
        """Whole frames of interleaved 16-bit PCM as they arrive (reads of about 100 ms), until the stream
        ends, ``limit`` bytes were taken or the samples its wav header promises were. Afterwards
        ``self.taken`` is the bytes taken, ``self.partial`` those of a frame the stream ended inside."""
        frame = 2 * self.channels
        if self.promised is not None:
            limit = min(limit, self.promised)
        read = max(1, self.rate // 10) * frame
        # a header longer than the first read leaves nothing of the samples read yet
        piece, self._head = self._head or (self.pipe.read(int(min(read, limit))) if limit > 0 else b""), b""
        carry, taken = b"", 0
        self.taken = self.partial = 0
        while piece and taken < limit:
            piece = carry + piece[: int(min(len(piece), limit - taken))]
            taken += len(piece) - len(carry)
            self.taken = taken
            cut = len(piece) - len(piece) % frame
            carry = piece[cut:]
            if cut:
                yield piece[:cut]
            if taken < limit:
                piece = self.pipe.read(int(min(read, limit - taken)))
        self.partial = len(carry) if taken < limit else 0  # the stream ended (not the limit) inside a frame

    def blocks(self, duration: float | None = None) -> Iterator[np.ndarray]:
        """Mono float32 blocks ``(n,)`` of about 100 ms as they arrive, until the stream ends or ``duration``
        seconds were read; raises :class:`AudioError` if the stream ends inside a sample, or before the
        samples its wav header promises."""
        from edgessm.data.audio import AudioError

        frame = 2 * self.channels
        limit = math.inf if duration is None else round(duration * self.rate) * frame
        if self.promised is not None:
            limit = min(limit, self.promised)
        for data in self.raw_blocks(limit):
            yield pcm16_mono(data, self.channels)
        taken = self.taken
        if self.partial:
            raise AudioError(
                f"{self.name} ended inside a sample ({self.partial} bytes of a {frame}-byte frame): it was cut off "
                "or is not 16-bit PCM; send whole samples"
            )
        if self.promised is not None and taken < limit:
            raise AudioError(
                f"{self.name} ends early: its wav header promises {self.promised / frame / self.rate:.2f} s, "
                f"it sent {taken / frame / self.rate:.2f} s; send the whole stream"
            )


def pcm16_frames(data: bytes, channels: int) -> np.ndarray:
    """Interleaved 16-bit little-endian PCM frames -> ``(channels, frames)`` float32 in [-1, 1), as
    libsndfile reads them (``sample / 32768``)."""
    x = np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
    return x.reshape(-1, channels).T


def pcm16_mono(data: bytes, channels: int) -> np.ndarray:
    """Interleaved 16-bit little-endian PCM frames -> ``(frames,)`` float32 in [-1, 1), channels averaged."""
    x = np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
    return x if channels == 1 else x.reshape(-1, channels).mean(axis=1)
