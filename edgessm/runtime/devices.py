"""Audio devices for the live commands: importing PortAudio's binding with a useful error,
reading ``--device`` values, opening a microphone at a setting it takes, and the capture loop the live
commands run, with its watchdog for a microphone that goes away (torch-free)."""

from __future__ import annotations

import atexit
import math
import queue
import threading
import time
from collections.abc import Callable

import numpy as np

from .interrupts import whole_blocks


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


class MicrophoneLost(Exception):
    """The microphone went away while it was being listened to: its stream ended on its own (the device
    was unplugged or its sound server dropped it) or delivered no audio for the watchdog's time."""


STOP_TIMEOUT_S = 2.0  # longest wait for PortAudio to stop a stream (it can hang when the sound server does)
_left_behind: list = []  # streams that PortAudio did not stop within STOP_TIMEOUT_S
START_GRACE_S = 5.0  # the watchdog's wait for the first audio of a stream (a loaded machine starts slowly)


class Microphone:
    """A started PortAudio input stream whose callback (PortAudio's thread) only copies each block,
    mixed to mono, into :attr:`blocks` and counts input overflows in :attr:`overflows`.

    It opens the device at ``rate`` with ``channels`` channels if it can; where the device refuses, it
    tries its other channel counts (1, 2, its maximum; blocks are then the average of the channels)
    and then the ``rates`` given (opt-in: the caller must handle :attr:`rate`). :attr:`rate` and
    :attr:`channels` say what it opened. Raises what ``no_microphone(exception)`` builds (with the
    first refusal) when no setting works.

    ``stall_s`` (opt-in) turns on the watchdog of :meth:`pump`: it raises :class:`MicrophoneLost`
    when the stream ends on its own, or when no audio came for ``stall_s`` seconds
    (:data:`START_GRACE_S` for the first audio, if longer; ``0`` or ``inf``: it only watches for the
    end). It also bounds the wait for PortAudio to stop the stream (:func:`stop_stream`). With
    ``None``, :meth:`pump` waits for audio, and for the stream to stop, forever, as before.
    """

    def __init__(self, sd, device, rate: int, block_s: float, no_microphone, channels: int = 1,
                 rates: tuple[int, ...] = (), stall_s: float | None = None) -> None:  # fmt: skip
        self.blocks: queue.SimpleQueue = queue.SimpleQueue()
        self.overflows = 0
        self.stall_s = stall_s
        self.ended = False  # the stream finished (PortAudio's finished callback)
        self._stopping = False  # ... because it was asked to
        self._sd = sd
        try:
            most = int(sd.query_devices(device, "input").get("max_input_channels") or 0)
        except (ValueError, sd.PortAudioError):
            most = 0
        counts = [c for c in dict.fromkeys((channels, 1, 2, most)) if c > 0 and (not most or c <= most)]
        first = None
        for r in dict.fromkeys((rate, *rates)):
            for c in counts:
                try:
                    self._open(sd, device, r, c, block_s)
                    return
                except (ValueError, sd.PortAudioError) as e:
                    first = first or e
        raise no_microphone(first) from None

    def _open(self, sd, device, rate: int, channels: int, block_s: float) -> None:
        stream = sd.InputStream(device=device, channels=channels, samplerate=rate, dtype="float32",
                                blocksize=max(1, round(rate * block_s)), callback=self._callback,
                                finished_callback=self._finished)  # fmt: skip
        try:
            stream.start()
        except BaseException:
            stream.close()
            raise
        self.stream, self.rate, self.channels = stream, rate, channels

    def _callback(self, indata, frames, t, status) -> None:  # count, copy (mixed to mono), queue; nothing else
        if status.input_overflow:
            self.overflows += 1
        self.blocks.put(indata[:, 0].copy() if indata.shape[1] == 1 else indata.mean(axis=1, dtype=np.float32))

    def _finished(self) -> None:
        self.ended = True

    def lost(self) -> str | None:
        """Why the stream can deliver no more audio (it ended without being asked to), else ``None``."""
        if self.ended and not self._stopping:
            return "its audio stream ended (device unplugged, or dropped by the sound server)"
        return None

    def stop(self, abort: bool = False) -> bool:
        """Stop (``abort``: drop what PortAudio still holds, which does not wait on a stalled device) and
        close the stream. With the watchdog, False when PortAudio did not manage within
        :data:`STOP_TIMEOUT_S` (the stream is then left behind, see :func:`stop_stream`)."""
        self._stopping = True
        if self.stall_s is None:
            (self.stream.abort if abort else self.stream.stop)()
            self.stream.close()
            return True
        return stop_stream(self._sd, self.stream, abort)

    def abort(self) -> bool:
        return self.stop(abort=True)

    def close(self) -> None:
        """Nothing: :meth:`stop` closes the stream too."""

    def pump(self, duration: float | None, feed: Callable, idle: Callable[[], None] | None = None,
             poll_s: float = 0.1) -> bool:  # fmt: skip
        """:func:`pump_blocks` on this microphone (which it stops and closes), with the watchdog if
        ``stall_s`` was given."""
        watch = self.stall_s is not None
        stall_s = self.stall_s if watch and 0 < self.stall_s < math.inf else None
        return pump_blocks(self, self.blocks, duration, feed, idle, poll_s, self.lost if watch else None, stall_s)


def stop_stream(sd, stream, abort: bool = False, timeout_s: float | None = None) -> bool:
    """``stream.stop()`` (``abort``: ``stream.abort()``) and ``stream.close()``, but not waiting more than
    ``timeout_s`` (default :data:`STOP_TIMEOUT_S`) for them: PortAudio can block for as long as the
    sound server is stalled (Ctrl-C does not cut the wait short). Returns whether they finished in
    time; if not, they are left running in a daemon thread, the stream is counted by
    :func:`streams_left_behind`, and sounddevice's exit handler (which would stop it again and hang
    the interpreter's exit) is unregistered."""

    def run() -> None:
        for step in (stream.abort if abort else stream.stop, stream.close):
            try:
                step()
            except Exception:  # a stream whose device went away may refuse to stop; close it anyway
                pass

    worker = threading.Thread(target=run, name="stop-microphone", daemon=True)
    worker.start()
    deadline = time.monotonic() + (STOP_TIMEOUT_S if timeout_s is None else timeout_s)
    while worker.is_alive() and (left := deadline - time.monotonic()) > 0:
        try:
            worker.join(left)
        except KeyboardInterrupt:  # a second Ctrl-C: the stream is being stopped already, and not for long
            pass
    if not worker.is_alive():
        return True
    _left_behind.append(stream)
    handler = getattr(sd, "_exit_handler", None)
    if handler is not None:
        atexit.unregister(handler)
    return False


def streams_left_behind() -> int:
    """How many streams PortAudio did not stop in time (:func:`stop_stream`). With one, the normal exit of
    the interpreter can hang or crash in PortAudio or the sound server's client library: end the
    process with ``os._exit`` once its output is flushed."""
    return len(_left_behind)


def pump_blocks(mic, blocks: queue.SimpleQueue, duration: float | None, feed: Callable,
                idle: Callable[[], None] | None = None, poll_s: float = 0.1,
                lost: Callable[[], str | None] | None = None, stall_s: float | None = None) -> bool:  # fmt: skip
    """The live loop: ``feed(block)`` every captured block until ``duration`` seconds have passed
    (``None``: forever) or Ctrl-C, then stop and close ``mic``. After a timed end, the blocks captured
    before the stream stopped are fed too. ``idle()`` runs when no block came within ``poll_s``. A
    Ctrl-C during ``feed`` ends the loop once that block is done (:func:`~.interrupts.whole_blocks`).

    The watchdog, when no block is waiting: ``lost()`` says why the stream can deliver no more (or
    ``None``), and ``stall_s`` is the longest silence allowed (:data:`START_GRACE_S` before the first
    block, if longer); either ends the loop with :class:`MicrophoneLost` once every block captured
    before it was fed. A pause of the whole process (Ctrl-Z, a starved machine) restarts the silence's
    clock instead of counting as silence.

    Returns whether Ctrl-C ended the loop.
    """
    interrupted, why = False, None
    try:
        start = time.monotonic()
        heard = polled = start  # the last block; the last look at the queue
        limit = max(stall_s, START_GRACE_S) if stall_s else None
        while duration is None or time.monotonic() - start < duration:
            try:
                block = blocks.get(timeout=poll_s)
            except queue.Empty:
                if idle is not None:
                    idle()
                now = time.monotonic()
                if now - polled > poll_s + 1.0:  # this process was not running: that was no silence
                    heard = now
                polled = now
                why = lost() if lost is not None else None
                if why is None and limit is not None and now - heard > limit:
                    why = f"no audio for {now - heard:.1f} s (device unplugged, or its sound server stalled)"
                if why is not None:
                    break
                continue
            with whole_blocks():
                feed(block)
            heard = polled = time.monotonic()
            limit = stall_s
    except KeyboardInterrupt:  # Ctrl-C: the normal end of a live session
        interrupted = True
    finally:
        (mic.stop if why is None else mic.abort)()  # a lost stream holds nothing more worth waiting for
        mic.close()
    while not interrupted:
        try:
            block = blocks.get_nowait()
        except queue.Empty:
            break
        with whole_blocks():
            feed(block)
    if why is not None:
        raise MicrophoneLost(why)
    return interrupted
