"""Build ``demos/keywords.wav`` and ``demos/keywords.txt``: real spoken command words over real background noise.

    python demos/make_demo.py            # rewrites demos/keywords.wav and demos/keywords.txt
    python demos/make_demo.py --out DIR  # somewhere else (the test compares the two)

Eight command words, each said by a different real speaker, come from the Speech Commands v0.02
*test* clips (held-out speakers; CC BY 4.0, Warden 2018) in the project's shared data folder
(``$EDGESSM_SHARED_DATA`` or ``../shared/data``). Each word is cut to its spoken part (plus a
short margin, with fades), brought to the same loudness and placed with onsets 1.5-1.8 s apart
over a quiet stretch of the real ``doing_the_dishes`` background recording. The choice of clips
is a pure function of the data (a hash of each clip's path), so the output is the same bytes on
every run. ``keywords.txt`` has one line per word: ``start_s end_s word speaker`` (the spoken
part, in seconds from the start of the file). ``--credits`` prints the Markdown credit table of
the chosen clips (it is in ``demos/README.md``).

numpy, soundfile and edgessm.data only.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np

from edgessm.data.audio import load_audio, write_audio
from edgessm.data.corpora import shared_data_dir

RATE = 16000
# the order the words are spoken in: 8 of the 10 Speech Commands command words
WORDS = ("yes", "left", "stop", "no", "up", "right", "go", "off")
ONSET_GAPS_S = (1.6, 1.8, 1.5, 1.7, 1.6, 1.8, 1.5)  # between consecutive word onsets
LEAD_S, TAIL_S = 0.8, 0.8  # background before the first word and after the last
MARGIN_S, FADE_S = 0.05, 0.015  # kept around each spoken part; fade in/out of each cut
SPEECH_DBFS = -20.0  # RMS of every spoken part
PEAK_LIMIT = 10 ** (-1 / 20)  # ...unless that would put a peak above -1 dBFS
NOISE = "doing_the_dishes.wav"
NOISE_DBFS = -50.0  # RMS of the background (30 dB below the words)
FRAME = 160  # 10 ms analysis frames


def frame_db(x: np.ndarray) -> np.ndarray:
    n = len(x) // FRAME
    rms = np.sqrt(np.mean(np.square(x[: n * FRAME].reshape(n, FRAME), dtype=np.float64), axis=1))
    return 20 * np.log10(np.maximum(rms, 1e-10))


def spoken_part(x: np.ndarray) -> tuple[int, int] | None:
    """``(start, end)`` samples of the word in a 1 s clip, or None if the clip is not a clean, whole word.

    The word is the span of 10 ms frames more than 15 dB above the clip's floor (its 10th percentile
    frame) and within 40 dB of its loudest frame, so quiet fricatives and releases count. The clip
    qualifies when its floor is at least 45 dB below the word (a quiet recording), the word is
    0.25-0.9 s long, does not touch the clip's edges and does not clip.
    """
    db = frame_db(x)
    floor = float(np.percentile(db, 10))
    if floor > db.max() - 45 or np.abs(x).max() >= 0.99:
        return None
    loud = np.flatnonzero(db > max(db.max() - 40, floor + 15))
    start, end = int(loud[0]) * FRAME, (int(loud[-1]) + 1) * FRAME
    if not 0.25 <= (end - start) / RATE <= 0.9 or start < 0.05 * RATE or end > len(x) - 0.05 * RATE:
        return None
    return start, end


def rank(path: str) -> str:
    return hashlib.sha256(f"edgessm demo {path}".encode()).hexdigest()


def choose_clips(shared: Path) -> list[dict]:
    """One clean test clip per word in :data:`WORDS`, every one from a different speaker."""
    import csv

    folder = shared / "speech_commands_test_v0.02"
    with open(folder / "manifest.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["label"] in WORDS and r["word"] == r["label"] and r["speaker"]]
    chosen, speakers = [], set()
    for word in WORDS:
        for r in sorted((r for r in rows if r["word"] == word), key=lambda r: rank(r["path"])):
            if r["speaker"] in speakers:
                continue
            audio, rate = load_audio(folder / r["path"], sr=None)
            part = spoken_part(audio) if rate == RATE else None
            if part is not None:
                chosen.append({**r, "audio": audio, "part": part})
                speakers.add(r["speaker"])
                break
        else:
            raise SystemExit(f"no clean clip of {word!r} from a new speaker in {folder}")
    return chosen


def build(shared: Path) -> tuple[np.ndarray, list[tuple[float, float, str, str]], list[dict]]:
    clips = choose_clips(shared)
    margin, fade = round(MARGIN_S * RATE), round(FADE_S * RATE)
    onsets = [LEAD_S, *np.cumsum(ONSET_GAPS_S) + LEAD_S]
    last_len = (clips[-1]["part"][1] - clips[-1]["part"][0]) / RATE
    total = round((onsets[-1] + last_len + TAIL_S) * RATE)

    noise, _ = load_audio(shared / "speech_commands_background_noise" / NOISE, sr=RATE)
    # the quietest stretch of the recording that is long enough (clatter-free where possible)
    step = RATE // 2
    starts = range(0, len(noise) - total, step)
    offset = min(starts, key=lambda s: float(np.mean(np.square(noise[s : s + total], dtype=np.float64))))
    bed = noise[offset : offset + total].astype(np.float64)
    bed *= 10 ** (NOISE_DBFS / 20) / np.sqrt(np.mean(np.square(bed)))

    out, labels = bed.copy(), []
    for clip, onset in zip(clips, onsets, strict=True):
        start, end = clip["part"]
        x = clip["audio"].astype(np.float64)
        gain = 10 ** (SPEECH_DBFS / 20) / np.sqrt(np.mean(np.square(x[start:end])))
        gain = min(gain, PEAK_LIMIT / np.abs(x).max())
        lo, hi = max(0, start - margin), min(len(x), end + margin)
        piece = x[lo:hi] * gain
        ramp = np.linspace(0.0, 1.0, fade)
        piece[:fade] *= ramp
        piece[-fade:] *= ramp[::-1]
        at = round(onset * RATE) - (start - lo)  # the spoken part starts exactly at the onset
        out[at : at + len(piece)] += piece
        labels.append((round(onset, 3), round(onset + (end - start) / RATE, 3), clip["word"], clip["speaker"]))
    return out.astype(np.float32), labels, [{**c, "noise_offset_s": offset / RATE} for c in clips]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="folder to write into")
    ap.add_argument("--credits", action="store_true", help="print the Markdown credit table of the chosen clips")
    args = ap.parse_args(argv)
    audio, labels, clips = build(shared_data_dir())
    write_audio(args.out / "keywords.wav", audio, RATE)
    lines = [f"{start:.3f} {end:.3f} {word} {speaker}\n" for start, end, word, speaker in labels]
    (args.out / "keywords.txt").write_text("".join(lines))
    print(f"wrote {args.out / 'keywords.wav'} ({len(audio) / RATE:.2f} s, {len(labels)} words) and keywords.txt")
    if args.credits:
        print("\n| at (s) | word | speaker | Speech Commands v0.02 test clip |\n| --- | --- | --- | --- |")
        for (start, _, word, speaker), clip in zip(labels, clips, strict=True):
            print(f"| {start:.2f} | {word} | `{speaker}` | `{clip['path'].removesuffix('.flac')}` |")
        print(f"\nbackground: `{NOISE}` from {clips[0]['noise_offset_s']:.1f} s, {len(audio) / RATE:.2f} s long")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
