"""Signals of the live commands: Ctrl-C (SIGINT) and SIGTERM end a session cleanly.

Python raises ``KeyboardInterrupt`` between any two bytecodes of the main thread, so a Ctrl-C can land
half-way through a block of audio: after ``--record`` wrote it but before the stream counted it, say.
:func:`whole_blocks` holds such a press back until the block is done; :func:`one_ctrl_c` makes the first
press end the session and ignores the ones after it; :func:`sigterm_unwinds` turns SIGTERM into an
exception that unwinds like Ctrl-C (temporary files removed). All of them act in the main thread only
and leave the handlers elsewhere alone.
"""

from __future__ import annotations

import atexit
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(BaseException):
    """SIGTERM while working: unwind like Ctrl-C so the temporary file is removed."""


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def _handling(signum: int, handler) -> Iterator[None]:
    """``handler`` answers ``signum`` within the block; the previous handler afterwards."""
    old = signal.signal(signum, handler)
    try:
        yield
    finally:
        signal.signal(signum, old)


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` (in the main thread; elsewhere it is left alone)."""
    if not _main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated

    with _handling(signal.SIGTERM, handler):
        yield


_ignored_at_exit = False  # whether an exit handler ignores SIGINT (see one_ctrl_c)


@contextmanager
def one_ctrl_c() -> Iterator[None]:
    """Within the block, the first Ctrl-C (SIGINT) raises ``KeyboardInterrupt`` and the ones after it are
    ignored, as they are once :func:`ignore_ctrl_c` says the session is ending: a second press must
    not cut short stopping the microphone (PortAudio left half-stopped hangs or aborts the exit),
    committing ``--record`` or the summary. They stay ignored while the interpreter exits (Python gives
    SIGINT back its default action then, and a press would kill the process after a clean session).
    Main thread only; an ignored SIGINT (a background job) stays ignored."""
    global _ignored_at_exit
    if not _main_thread() or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return

    def first(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    try:
        with _handling(signal.SIGINT, first):
            yield
    finally:
        if not _ignored_at_exit:
            atexit.register(signal.signal, signal.SIGINT, signal.SIG_IGN)
            _ignored_at_exit = True


def ignore_ctrl_c() -> None:
    """The session is ending: from now on Ctrl-C is ignored (within :func:`one_ctrl_c`)."""
    if _main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def whole_blocks() -> Iterator[None]:
    """Within the block, a Ctrl-C waits for its end: the press is noted, and the handler that was in
    place when the block began acts on it as the block ends (raising ``KeyboardInterrupt``, usually).

    Wrap one block of audio's work in it (model step, record, counters), so that an interrupted session
    never holds half a block: what ``--record`` wrote and what the summary says was heard stay equal.
    Costs two ``signal.signal`` calls (microseconds). A SIGINT that is ignored or left to the system
    (``SIG_IGN``, ``SIG_DFL``), or code off the main thread, is left as it is. Nests: an inner block
    hands a press to the outer one. A block that raises keeps its own error (the press is dropped)."""
    old = signal.getsignal(signal.SIGINT) if _main_thread() else None
    if not callable(old):
        yield
        return
    pressed: list[tuple[int, object]] = []
    signal.signal(signal.SIGINT, lambda signum, frame: pressed.append((signum, frame)))
    try:
        yield
    except BaseException:  # the block's own error goes first; a press during it is not acted on
        signal.signal(signal.SIGINT, old)
        raise
    signal.signal(signal.SIGINT, old)
    if pressed:
        old(*pressed[0])
