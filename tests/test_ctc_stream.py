"""Streaming greedy CTC decoding: best path, word timings, endpointing, chunking invariance."""

from __future__ import annotations

import numpy as np
import pytest

from edgessm.data.text import CHARS
from edgessm.runtime.ctc import CtcStreamDecoder, EndpointConfig

FRAME = 0.02


def _logits(path: str) -> np.ndarray:
    """One-hot-ish logits (vocab, frames) whose argmax spells ``path``: '_' blank, others themselves."""
    ids = [0 if ch == "_" else CHARS.index(ch) for ch in path]
    out = np.full((len(CHARS), len(ids)), -5.0, np.float32)
    out[ids, np.arange(len(ids))] = 5.0
    return out


def _decode(path: str, chunk: int, endpoint: EndpointConfig | None = None):
    d = CtcStreamDecoder(CHARS, FRAME, endpoint)
    x = _logits(path)
    finals = []
    for pos in range(0, x.shape[1], chunk):
        finals += d.accept(x[:, pos : pos + chunk])
    last = d.flush()
    return finals + ([last] if last else [])


def test_best_path_collapses_runs_and_keeps_blank_separated_repeats() -> None:
    (seg,) = _decode("__hh_e_ll_l__oo___ wwo_rr_l_dd__", chunk=1000)
    assert seg.text == "hello world" and seg.final
    assert [w.text for w in seg.words] == ["hello", "world"]
    hello, world = seg.words
    assert hello.start_s == pytest.approx(2 * FRAME) and hello.end_s == pytest.approx(15 * FRAME)  # o: frames 13-14
    assert world.start_s == pytest.approx(19 * FRAME) and world.end_s == pytest.approx(30 * FRAME)  # d: 28-29


def test_chunking_does_not_change_the_result() -> None:
    path = "_a_bb _c" + "_" * 50 + "dd_ e" + "_" * 10
    ref = _decode(path, chunk=10_000)
    for chunk in (1, 3, 7, 16):
        assert _decode(path, chunk) == ref


def test_a_pause_ends_the_segment_and_the_next_one_starts() -> None:
    ep = EndpointConfig(trailing_silence_s=0.2)  # 10 frames
    d = CtcStreamDecoder(CHARS, FRAME, ep)
    assert d.accept(_logits("__yes_ ___")) == []
    assert d.partial().text == "yes" and not d.partial().final
    (seg,) = d.accept(_logits("______"))  # 10 silent frames after the last letter
    assert seg.text == "yes" and seg.final and seg.end_s == pytest.approx(5 * FRAME)
    assert d.partial().text == ""
    assert d.accept(_logits("no__")) == []
    last = d.flush()
    assert last is not None and last.text == "no" and last.start_s == pytest.approx(16 * FRAME)
    assert d.flush() is None


def test_long_segments_are_cut_and_silence_alone_never_ends_a_segment() -> None:
    d = CtcStreamDecoder(CHARS, FRAME, EndpointConfig(trailing_silence_s=0.1, max_segment_s=0.2))
    assert d.accept(_logits("_" * 100)) == []  # no text: nothing to end
    segs = d.accept(_logits("a_a_a_a_a_a_a_a_a_a_a_a"))
    assert segs and all(len(s.text) <= 10 for s in segs) and segs[0].text == "aaaaa"


def test_bad_logits_are_refused() -> None:
    d = CtcStreamDecoder(CHARS, FRAME)
    with pytest.raises(ValueError, match="expected logits of shape"):
        d.accept(np.zeros((5, 3)))
    with pytest.raises(ValueError, match="frame_s"):
        CtcStreamDecoder(CHARS, 0.0)
