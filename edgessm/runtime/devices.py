"""Audio devices for the live commands: importing PortAudio's binding with a useful error,
reading ``--device`` values, and the capture loop both live commands run (torch-free)."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable


def sounddevice_or_exit(command: str, alternative: str, error: type[SystemExit] = SystemExit):
    """The ``sounddevice`` module, or ``error`` saying how to install PortAudio and what else to try."""
    try:
        import sounddevice as sd
    except OSError as e:  # the PortAudio library itself is missing
        raise error(
            f"{command} needs PortAudio ({e}); install it (apt-get install libportaudio2) or {alternative}"
        ) from None
    return sd


def parse_device(value: str | None) -> int | str | None:
    """A ``--device`` value: an index when it is a number (sounddevice would match it as a name)."""
    return int(value) if value and value.isdigit() else value


def input_device(sd, value: str | None, no_microphone) -> tuple[int | str | None, dict, int]:
    """The ``--device`` microphone: ``(device, its description, its native rate)``.

    ``no_microphone(exception)`` builds the error raised when there is no such (or no) input device.
    """
    device = parse_device(value)
    try:
        info = sd.query_devices(device, "input")
    except (ValueError, sd.PortAudioError) as e:
        raise no_microphone(e) from None
    return device, info, int(info["default_samplerate"])


class Microphone:
    """A started PortAudio input stream of one channel whose callback (PortAudio's thread) only copies
    each block into :attr:`blocks` and counts input overflows in :attr:`overflows`.

    Raises what ``no_microphone(exception)`` builds when the device refuses to open.
    """

    def __init__(self, sd, device, rate: int, block_s: float, no_microphone) -> None:
        self.blocks: queue.SimpleQueue = queue.SimpleQueue()
        self.overflows = 0
        try:
            self.stream = sd.InputStream(device=device, channels=1, samplerate=rate, dtype="float32",
                                         blocksize=max(1, round(rate * block_s)), callback=self._callback)  # fmt: skip
            self.stream.start()
        except (ValueError, sd.PortAudioError) as e:
            raise no_microphone(e) from None

    def _callback(self, indata, frames, t, status) -> None:  # count, copy, queue; nothing else
        if status.input_overflow:
            self.overflows += 1
        self.blocks.put(indata[:, 0].copy())

    def pump(self, duration: float | None, feed: Callable, idle: Callable[[], None] | None = None,
             poll_s: float = 0.1) -> bool:  # fmt: skip
        """:func:`pump_blocks` on this microphone (which it stops and closes)."""
        return pump_blocks(self.stream, self.blocks, duration, feed, idle, poll_s)


def pump_blocks(mic, blocks: queue.SimpleQueue, duration: float | None, feed: Callable,
                idle: Callable[[], None] | None = None, poll_s: float = 0.1) -> bool:  # fmt: skip
    """The live loop: ``feed(block)`` every captured block until ``duration`` seconds have passed
    (``None``: forever) or Ctrl-C, then stop and close ``mic``. After a timed end, the blocks captured
    before the stream stopped are fed too. ``idle()`` runs when no block came within ``poll_s``.

    Returns whether Ctrl-C ended the loop.
    """
    interrupted = False
    try:
        start = time.monotonic()
        while duration is None or time.monotonic() - start < duration:
            try:
                feed(blocks.get(timeout=poll_s))
            except queue.Empty:
                if idle is not None:
                    idle()
    except KeyboardInterrupt:  # Ctrl-C: the normal end of a live session
        interrupted = True
    finally:
        mic.stop()
        mic.close()
    while not interrupted:
        try:
            feed(blocks.get_nowait())
        except queue.Empty:
            break
    return interrupted
