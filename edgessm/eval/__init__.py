"""Evaluation of exported models on held-out data, with onnxruntime and numpy only (no torch).

What is measured is what users run: the stepwise graphs, fed chunk by chunk from
the graph's start state (zeros, or after the warm-up silence in its metadata).

* :mod:`.streams` -- long test streams with keywords at known times, and their scoring;
* :mod:`.backgrounds` -- keyword-free speech, music-like and noise backgrounds;
* :mod:`.kws` -- clip accuracy (Speech Commands 12-class protocol, per word) and streaming
  detection rate / time error / false accepts per hour of a keyword-spotting graph;
* :mod:`.cli` -- ``edgessm eval``.
"""
