"""Ctrl-C in the live commands: a press in the middle of a block of audio waits for the block's end, so
``--record`` and the heard-time summary never disagree (the race once seen as a 30 ms record mismatch)."""

from __future__ import annotations

import os
import queue
import signal
from types import SimpleNamespace

import numpy as np
import pytest

from edgessm.runtime.devices import pump_blocks
from edgessm.runtime.interrupts import one_ctrl_c, whole_blocks
from edgessm.runtime.listen import Listener


def press_ctrl_c() -> None:
    """SIGINT to this process, and enough bytecodes after it for Python to run the handler."""
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(10_000):
        pass


@pytest.fixture(autouse=True)
def python_handles_sigint():
    """Python's own Ctrl-C handler for each test, as in a terminal. A shell starts a background job (``pytest
    ... &``) with SIGINT ignored, and the commands rightly leave an ignored SIGINT alone."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


class RecordedStream:
    """A stream whose recorder takes each block before the stream counts it, with a Ctrl-C between."""

    def __init__(self) -> None:
        self.model = SimpleNamespace(info=SimpleNamespace(sample_rate=16000))
        self.recorded = 0
        self.samples_in = 0

    def accept_waveform(self, rate: int, x: np.ndarray) -> None:
        self.recorded += len(x)
        press_ctrl_c()
        self.samples_in += len(x)

    def chunks(self):
        return iter(())


def test_a_ctrl_c_inside_a_block_acts_when_the_block_is_done() -> None:
    before = signal.getsignal(signal.SIGINT)
    done = []
    with pytest.raises(KeyboardInterrupt):
        with whole_blocks():
            press_ctrl_c()
            done.append(1)
    assert done == [1] and signal.getsignal(signal.SIGINT) is before
    with whole_blocks():  # no press, nothing raised
        done.append(2)
    assert done == [1, 2]


def test_a_block_that_fails_keeps_its_own_error() -> None:
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(ValueError, match="bad block"):
        with whole_blocks():
            press_ctrl_c()
            raise ValueError("bad block")
    assert signal.getsignal(signal.SIGINT) is before


def test_whole_blocks_nest_and_leave_an_ignored_sigint_alone() -> None:
    with pytest.raises(KeyboardInterrupt):
        with whole_blocks():
            with whole_blocks():
                press_ctrl_c()
            press_ctrl_c()  # the inner block handed its press on; the outer one acts once
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with whole_blocks():
            press_ctrl_c()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_listen_counts_the_block_a_ctrl_c_landed_in() -> None:
    """listen's first Ctrl-C lands after the recorder took a block and before the stream counted it: the
    block is still counted, and later presses are ignored, as in a session."""
    stream = RecordedStream()
    listener = Listener(stream, decider=None)
    with pytest.raises(KeyboardInterrupt), one_ctrl_c():
        listener.feed(16000, np.zeros(480, np.float32))
        listener.feed(16000, np.zeros(480, np.float32))  # never reached
    assert stream.recorded == stream.samples_in == 480


def test_the_microphone_loop_ends_after_the_block_it_was_pressed_in() -> None:
    blocks: queue.SimpleQueue = queue.SimpleQueue()
    for _ in range(3):
        blocks.put(np.zeros(160, np.float32))
    fed, stopped = [], []

    def feed(block: np.ndarray) -> None:
        press_ctrl_c()
        fed.append(len(block))

    mic = SimpleNamespace(stop=lambda: stopped.append("stop"), abort=None, close=lambda: stopped.append("close"))
    assert pump_blocks(mic, blocks, None, feed) is True  # Ctrl-C ended it
    assert fed == [160] and stopped == ["stop", "close"]
