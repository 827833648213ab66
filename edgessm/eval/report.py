"""Evaluation reports as Markdown tables (for model cards) and plots."""

from __future__ import annotations

from pathlib import Path

from edgessm.data.labels import SC12_LABELS, SC35_WORDS
from edgessm.eval.backgrounds import KINDS, describe_pool
from edgessm.plotting import pyplot

SET_NAMES = {
    "sc-test": "Speech Commands v0.02 test (real, 118 unseen speakers)",
    "sc-validation": "Speech Commands validation speakers (real, never trained on)",
    "synth-test": "synthetic test voices (unseen voices)",
    "fsdd": "FSDD test split (real digits, 8 kHz)",
}


#: how a stream report names the source of its keywords (``stream_metrics(...)["keyword_source"]``)
KEYWORD_SOURCES = {
    "sc-test": "the SC test set",
    "synth-validation": "the synthetic validation voices (validation streams, no test data)",
}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _threshold(row: dict, headline) -> str:
    """A sweep row's decision (a threshold, or ``calibrated`` per-keyword thresholds), bold if it is the headline."""
    th = row["threshold"]
    text = th if isinstance(th, str) else f"{th:.2f}"
    if headline is None:
        return text
    same = th == headline if isinstance(th, str) or isinstance(headline, str) else abs(th - headline) < 1e-9
    return f"**{text}**" if same else text


def kws_markdown(report: dict) -> str:
    lines: list[str] = []
    clips = report.get("clips", {})
    if clips:
        lines += ["| set | clips | exact class | 12-class protocol |", "|---|---:|---:|---:|"]
        for name, r in clips.items():
            lines.append(f"| {SET_NAMES.get(name, name)} | {r['clips']} | {_pct(r['accuracy'])} | "
                         f"{_pct(r['sc12']['accuracy'])} |")  # fmt: skip
        lines.append("")
    if "sc-test" in clips:
        per = clips["sc-test"]["sc12"]["per_class"]
        lines += ["Speech Commands test, 12-class protocol, recall per class:", ""]
        lines += ["| " + " | ".join(per) + " |", "|" + "---:|" * len(per)]
        lines += ["| " + " | ".join(_pct(v) for v in per.values()) + " |", ""]
        words = clips["sc-test"]["per_word"]
        lines += ["Speech Commands test, per word (the exact word among all classes):", ""]
        lines += ["| word | clips | accuracy | word | clips | accuracy |", "|---|---:|---:|---|---:|---:|"]
        names = [w for w in SC35_WORDS if w in words]
        half = (len(names) + 1) // 2
        for a, b in zip(names[:half], [*names[half:], *[None] * (2 * half - len(names))], strict=True):
            right = f"{b} | {words[b]['clips']} | {_pct(words[b]['accuracy'])}" if b else " | | "
            lines.append(f"| {a} | {words[a]['clips']} | {_pct(words[a]['accuracy'])} | {right} |")
        lines.append("")
    for key, how in (("read_speech", "everyday levels"), ("read_speech_loud", "a close microphone")):
        read = report.get(key)
        if not read:
            continue
        lo, hi = read.get("level_dbfs", (-35, -20))
        lines += [f"Running read speech at {how}, {lo:g}..{hi:g} dBFS ({read['hours']:.2f} h, {read['utterances']} "
                  "utterances of readers no recipe trains on): false accepts of keywords the transcript does not say "
                  "(a keyword said anywhere in an utterance excuses its detections there: a lower bound)", "",
                  "| threshold | false accepts | per hour | most often |", "|---:|---:|---:|---|"]  # fmt: skip
        for r in read["sweep"]:
            top = ", ".join(f"{w} {n}" for w, n in list(r["by_word"].items())[:5])
            lines.append(f"| {r['threshold']} | {r['false_accepts']} | {r['false_accepts_per_hour']:.1f} | {top} |")
        lines.append("")
    streams = report.get("streams")
    if streams:
        th = report.get("decision", report.get("threshold"))
        hours = streams["sweep"][0]["keyword_free_hours"]
        lines += [
            f"Streaming (smoothing {streams['smooth_frames']} frames, refractory {streams['refractory_s']} s; "
            f"keywords from {KEYWORD_SOURCES[streams.get('keyword_source', 'sc-test')]} in speech/music/noise "
            f"backgrounds; false accepts on "
            f"{hours:.2f} h of keyword-free audio"
            + (f"; {streams['music']} music" if streams.get("music") else "")
            + (f"; {describe_pool(streams['speech_pool'], hours / len(KINDS))}" if streams.get("speech_pool") else "")
            + "):",
            "",
            "| threshold | detected | speech | music | noise | median time error | FA / hour | FA speech/music/noise |",
            "|---:|---:|---:|---:|---:|---:|---:|---|",
        ]  # fmt: skip
        for row in streams["sweep"]:
            by = row["by_background"]
            err = row["time_error_median_s"]
            fa = row["false_accepts_by_background"]
            lines.append(
                f"| {_threshold(row, th)} | {_pct(row['detection_rate'])} | "
                + " | ".join(_pct(by[k]["detection_rate"]) if k in by else "-" for k in ("speech", "music", "noise"))
                + f" | {'-' if err is None else f'{1000 * err:+.0f} ms'} | {row['false_accepts_per_hour']:.1f} | "
                + "/".join(str(fa.get(k, 0)) for k in ("speech", "music", "noise"))
                + " |"
            )
        lines.append("")
    sessions = report.get("sessions")
    if sessions:
        th = report.get("decision", report.get("threshold"))
        lines += [
            "User sessions (held-out real speakers, 1.5-2.5 s pauses, a quiet room; a hit is the right word "
            "from its start to 1 s after its end; *reached*: the right word's smoothed posterior reached the "
            "threshold there, detected or not, so reached minus detected is what the decision lost):",
            "",
            "| threshold | ten commands | all 35 words | wrong word (ten / 35) | reached (ten / 35) |",
            "|---:|---:|---:|---:|---:|",
        ]
        kinds = ("session-commands", "session-35")
        for row in sessions["sweep"]:
            by = row["by_background"]
            hit = [_pct(by[k]["detection_rate"]) if k in by else "-" for k in kinds]
            wrong = [_pct(by[k]["wrong_words"] / max(1, by[k]["hits"] + by[k]["misses"]))
                     if k in by and "wrong_words" in by[k] else "-" for k in kinds]  # fmt: skip
            reach = [_pct(by[k]["reach_rate"]) if k in by and "reach_rate" in by[k] else "-" for k in kinds]
            lines.append(f"| {_threshold(row, th)} | {hit[0]} | {hit[1]} | {wrong[0]} / {wrong[1]} | "
                         f"{reach[0]} / {reach[1]} |")  # fmt: skip
        lines.append("")
        for key, kind, how, words in (("quiet_sessions", "session-quiet", "A quiet microphone", "-45..-30"),
                                      ("loud_sessions", "session-loud", "A close microphone", "-18..-3")):  # fmt: skip
            played = report.get(key)
            if not played:
                continue
            row = played["sweep"][0]
            by = row["by_background"][kind]
            gain = played["gain_db"]
            lines += [
                f"{how} (the ten-command session {gain:g} dB {'quieter' if gain < 0 else 'louder'}: words at "
                f"{words} dBFS) at threshold {row['threshold']:g}: {_pct(by['detection_rate'])} of the "
                f"commands, wrong word {_pct(by['wrong_words'] / max(1, by['hits'] + by['misses']))}.",
                "",
            ]
        lines += _session_words(sessions, th)
    return "\n".join(lines)


def _session_words(sessions: dict, headline) -> list[str]:
    """Per-word hit rates in the sessions (both streams) at the headline decision, two words a row."""
    rows = [r for r in sessions["sweep"] if "per_word" in r and _threshold(r, headline).startswith("**")]
    if not rows:
        return []
    words = rows[0]["per_word"]
    names = [w for w in SC35_WORDS if w in words]
    rate = {w: _pct(words[w]["hits"] / max(1, words[w]["keywords"])) for w in names}
    lines = [f"Sessions per word at {_threshold(rows[0], None)} (both streams):", "",
             "| word | said | hit | word | said | hit |", "|---|---:|---:|---|---:|---:|"]  # fmt: skip
    half = (len(names) + 1) // 2
    for a, b in zip(names[:half], [*names[half:], *[None] * (2 * half - len(names))], strict=True):
        right = f"{b} | {words[b]['keywords']} | {rate[b]}" if b else " | | "
        lines.append(f"| {a} | {words[a]['keywords']} | {rate[a]} | {right} |")
    pairs = sorted(((n, said, heard) for said, got in rows[0].get("named_instead", {}).items()
                    for heard, n in got.items()), key=lambda x: (-x[0], x[1], x[2]))  # fmt: skip
    if pairs:
        lines += ["", "Wrong words (said → detected instead, times): "
                  + ", ".join(f"{said} → {heard} {n}" for n, said, heard in pairs) + "."]  # fmt: skip
    return [*lines, ""]


def kws_plots(report: dict, out: Path) -> list[Path]:
    """The SC-test 12-class confusion matrix and the detection / false-accept curve, as PNGs."""
    plt = pyplot()
    if plt is None:
        return []
    written = []
    sc = report.get("clips", {}).get("sc-test")
    if sc:
        import numpy as np

        m = np.array(sc["sc12"]["confusion"], float)
        m = m / np.maximum(1, m.sum(1, keepdims=True))
        fig, ax = plt.subplots(figsize=(6.5, 5.5))
        ax.imshow(m, cmap="Blues", vmin=0, vmax=1)
        ax.set_xticks(range(12), SC12_LABELS, rotation=60)
        ax.set_yticks(range(12), SC12_LABELS)
        for i in range(12):
            for j in range(12):
                if m[i, j] >= 0.01:
                    ax.text(j, i, f"{100 * m[i, j]:.0f}", ha="center", va="center", fontsize=7,
                            color="white" if m[i, j] > 0.5 else "black")  # fmt: skip
        ax.set_xlabel("predicted")
        ax.set_ylabel("spoken")
        ax.set_title(f"Speech Commands test, 12-class: {100 * sc['sc12']['accuracy']:.1f}%")
        fig.tight_layout()
        written.append(out / "confusion.png")
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)
    streams = report.get("streams")
    if streams:
        rows = [r for r in streams["sweep"] if not isinstance(r["threshold"], str)]
        fig, ax = plt.subplots(figsize=(5.5, 4))
        ax.plot([r["false_accepts_per_hour"] for r in rows], [100 * r["detection_rate"] for r in rows], "o-",
                label="one threshold for every keyword")  # fmt: skip
        for r in rows:
            ax.annotate(f"{r['threshold']:.2f}", (r["false_accepts_per_hour"], 100 * r["detection_rate"]),
                        textcoords="offset points", xytext=(4, -10), fontsize=7)  # fmt: skip
        for r in streams["sweep"]:
            if r["threshold"] == "calibrated":
                ax.plot([r["false_accepts_per_hour"]], [100 * r["detection_rate"]], "r*", markersize=12,
                        label="shipped per-keyword thresholds")  # fmt: skip
                ax.legend(fontsize=8, loc="lower right")
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(left=0)
        ax.set_xlabel("false accepts per hour (keyword-free audio)")
        ax.set_ylabel("keywords detected (%)")
        ax.grid(alpha=0.3)
        ax.set_title("Streaming detection vs false accepts (threshold sweep)")
        fig.tight_layout()
        written.append(out / "detection.png")
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)
    return written


def calibration_markdown(report: dict) -> str:
    """Validation DET table of ``edgessm eval --calibrate``: per-keyword thresholds at each false-accept
    budget beside single global thresholds, and the chosen thresholds."""
    kinds = ("validation-session", "validation-speech", "validation-music", "validation-noise")
    pool = ""
    if report.get("speech_pool"):
        pool = f" (its {describe_pool(report['speech_pool'], report['keyword_free_hours'] / len(KINDS))})"
    lines = [
        f"Validation streams: {report['validation_keywords']} keywords (real validation speakers; synthetic "
        f"validation voices for words without enough of them), false accepts on {report['keyword_free_hours']:.1f} h "
        f"of keyword-free validation audio{pool}. No test data.",
        "",
        "| decision | detected | session | speech | music | noise | FA / hour |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [(f"per-keyword, budget {r['budget']:g} FA/h", r) for r in report["calibrated"]]
    rows += [(f"one threshold {r['threshold']:.3g}", r) for r in report["single"]]
    for name, r in rows:
        by = r["by_background"]
        lines.append(f"| {name} | {_pct(r['detection_rate'])} | "
                     + " | ".join(_pct(by[k]["detection_rate"]) if k in by else "-" for k in kinds)
                     + f" | {r['false_accepts_per_hour']:.1f} |")  # fmt: skip
    chosen = report["chosen"]
    lines += ["", f"Chosen per-keyword thresholds (budget {report['max_fa_per_hour']:g} FA/h):", "",
              "| " + " | ".join(chosen) + " |", "|" + "---:|" * len(chosen),
              "| " + " | ".join(f"{v:.3g}" for v in chosen.values()) + " |", ""]  # fmt: skip
    unscored = report.get("allocation", {}).get("unscored")
    if unscored:
        lines += [f"No validation keywords of {', '.join(unscored)}: each keeps the one threshold for every word "
                  "that meets the budget.", ""]  # fmt: skip
    return "\n".join(lines)


def calibration_plot(report: dict, path: Path) -> Path | None:
    """The validation DET curve: per-keyword thresholds vs one global threshold."""
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for rows, style, label in ((report["single"], "o-", "one threshold for every keyword"),
                               (report["calibrated"], "s-", "per-keyword thresholds (calibrated)")):  # fmt: skip
        ax.plot([r["false_accepts_per_hour"] for r in rows], [100 * r["detection_rate"] for r in rows], style,
                label=label, markersize=4)  # fmt: skip
    ax.axvline(report["max_fa_per_hour"], color="gray", lw=0.8, ls="--")
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlim(left=0)
    ax.set_xlabel("false accepts per hour (keyword-free validation audio)")
    ax.set_ylabel("validation keywords detected (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Validation DET: detection vs false accepts")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- denoising --------------------------------------------------------------------------------------------------

DENOISE_COLUMNS = (("pesq", "PESQ-WB", "{:.2f}"), ("stoi", "STOI", "{:.3f}"), ("si_sdr", "SI-SDR dB", "{:.1f}"),
                   ("si_sdr_i", "SI-SDRi dB", "{:+.1f}"), ("dnsmos_sig", "DNSMOS SIG", "{:.2f}"),
                   ("dnsmos_bak", "DNSMOS BAK", "{:.2f}"), ("dnsmos_ovrl", "DNSMOS OVRL", "{:.2f}"),
                   ("pause_db", "pauses dB", "{:.1f}"))  # fmt: skip


def _fmt(fmt: str, x) -> str:
    return "-" if x is None or x != x else fmt.format(x)


def denoise_markdown(report: dict) -> str:
    """Mean metrics and RTF per system; SI-SDRi and PESQ by SNR and by noise; ratios to the peers."""
    systems = report["systems"]
    head = "| system | " + " | ".join(c[1] for c in DENOISE_COLUMNS) + " | RTF (1 thread) | latency ms |"
    lines = [head, "|---|" + "---:|" * (len(DENOISE_COLUMNS) + 2)]
    for name, s in systems.items():
        cells = [_fmt(f, s["mean"].get(k)) for k, _, f in DENOISE_COLUMNS]  # reports before a column: "-"
        rtf = "-" if name == "noisy" else _fmt("{:.4f}", s["rtf"])
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {rtf} | {_fmt('{:.1f}', s.get('latency_ms'))} |")
    ours = report.get("model")
    if ours in systems:
        lines += ["", f"Ratios of {ours} to each peer (metric ratio; RTF ratio < 1 means {ours} is cheaper):", ""]
        lines += ["| peer | PESQ | STOI | DNSMOS OVRL | RTF |", "|---|---:|---:|---:|---:|"]
        for name, s in systems.items():
            if name in (ours, "noisy"):
                continue
            o = systems[ours]
            r = [o["mean"][k] / s["mean"][k] if s["mean"][k] else float("nan") for k in ("pesq", "stoi", "dnsmos_ovrl")]
            lines.append(f"| {name} | " + " | ".join(_fmt("{:.3f}", x) for x in r)
                         + f" | {_fmt('{:.3f}', o['rtf'] / s['rtf'] if s['rtf'] else None)} |")  # fmt: skip
    tables = [
        (k, label, fmt, g)
        for k, label, fmt in (("si_sdr_i", "SI-SDR improvement (dB)", "{:+.1f}"), ("pesq", "PESQ-WB", "{:.2f}"))
        for g in ("by_snr", "by_noise")
    ]
    tables += [("stoi", "STOI", "{:.3f}", "by_noise"), ("dnsmos_ovrl", "DNSMOS OVRL", "{:.2f}", "by_noise")]
    titles = {"by_snr": "input SNR (dB)", "by_noise": "noise"}
    if report.get("split") == "validation":
        lines += ["", "Mixtures: the **validation** speakers and noises (for tuning; not a test result)."]
    if report.get("music"):
        lines += ["", f"Music mixtures: {report['music']} music."]
    if "everyday" in report.get("noise_kinds", ()):
        lines += ["", "Everyday mixtures: recorded everyday sound (the ambience packages' held-out recordings)."]
    for key, label, fmt, group in tables:
        cols = list(next(iter(systems.values()))[group])
        lines += ["", f"{label} by {titles[group]}:", "", "| system | " + " | ".join(cols) + " |",
                  "|---|" + "---:|" * len(cols)]  # fmt: skip
        for name, s in systems.items():
            lines.append(f"| {name} | " + " | ".join(_fmt(fmt, s[group][c][key]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def denoise_plots(report: dict, out: Path) -> list[Path]:
    """PESQ, STOI and SI-SDR against input SNR for every system, one PNG."""
    plt = pyplot()
    if plt is None:
        return []
    from edgessm.atomic import atomic_path

    systems = report["systems"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, (key, label) in zip(axes, (("pesq", "PESQ-WB"), ("stoi", "STOI"), ("si_sdr", "SI-SDR (dB)")), strict=True):
        for name, s in systems.items():
            snrs = [float(k) for k in s["by_snr"]]
            ax.plot(snrs, [s["by_snr"][k][key] for k in s["by_snr"]], "o-" if name != "noisy" else "k--", label=name)
        ax.set_xlabel("input SNR (dB)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"Held-out real speech in unseen noise ({report['mixtures']} mixtures)")
    fig.tight_layout()
    path = out / "denoise_metrics.png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return [path]


ASR_SET_NAMES = {
    "synth-sentences": "synthetic test voices, sentences",
    "synth-words": "synthetic test voices, single words",
    "real-sentences": "real read sentences, held-out speakers",
    "real-stream": "the same sentences joined 10 to a stream (state kept across it)",
    "fsdd-digits": "FSDD real digits (8 kHz)",
    "fsdd-strings": "FSDD digit strings (3-5 digits, one speaker)",
    "sc-test": "Speech Commands test words (real, unseen speakers)",
}


def asr_markdown(report: dict) -> str:
    """WER / CER / utterance error rate / RTF per set and system; the streaming latencies."""
    lines = []
    for set_name, systems in report["sets"].items():
        first = next(iter(systems.values()))
        lines += [f"**{set_name}** — {ASR_SET_NAMES.get(set_name, set_name)}: {first['utterances']} utterances, "
                  f"{first['words']} words, {first['audio_s'] / 60:.1f} min", "",
                  "| system | WER | CER | utterances wrong | RTF (1 thread) |",
                  "|---|---:|---:|---:|---:|"]  # fmt: skip
        for name, s in systems.items():
            lines.append(f"| {name} | {s['wer']:.1%} | {s['cer']:.1%} | {s['utterance_error_rate']:.1%} | "
                         f"{_fmt('{:.4f}', s['rtf'])} |")  # fmt: skip
        lines.append("")
        lines += _asr_per_word(systems)
    lat = report.get("latency")
    if lat:
        ft, fi, cp = lat["first_token_s"], lat["final_s"], lat["compute_per_chunk_ms"]
        lines += [f"Streaming latency of {report['model']} on {lat['utterances']} sentences (stream time; "
                  f"{lat['chunk_ms']:.0f} ms chunks, segments end after a {lat['pause_s']:.1f} s pause):", "",
                  "| | median | p90 |", "|---|---:|---:|",
                  f"| first token after speech onset | {ft['median']:.2f} s | {ft['p90']:.2f} s |",
                  f"| final result after end of speech | {fi['median']:.2f} s | {fi['p90']:.2f} s |",
                  f"| compute per chunk (1 thread) | {cp['median']:.2f} ms | {cp['p90']:.2f} ms |", ""]  # fmt: skip
    return "\n".join(lines)


def _asr_per_word(systems: dict) -> list[str]:
    """A set of one-word utterances: each word's share heard exactly, per system (words as columns would not
    fit: a row per word), and what the last system (``words`` when told the vocabulary) wrote instead, most
    often first; nothing for sets of sentences or strings."""
    tallies = {name: s.get("per_word") or {} for name, s in systems.items()}
    first = next(iter(systems.values()))
    words = sorted(set().union(*tallies.values()))
    if not words or sum(t[1] for t in next(iter(tallies.values())).values()) != first["utterances"]:
        return []
    names = list(systems)
    instead = systems[names[-1]].get("heard_instead") or {}
    lines = ["Per word (share of its clips heard exactly):", "",
             "| word | clips | " + " | ".join(names) + f" | {names[-1]} heard instead |",
             "|---|---:|" + "---:|" * len(names) + "---|"]  # fmt: skip
    for w in words:
        heard = next(t[w][1] for t in tallies.values() if w in t)
        cells = [f"{tallies[n][w][0] / tallies[n][w][1]:.0%}" if w in tallies[n] else "—" for n in names]
        wrong = ", ".join(
            (h or "(nothing)") + (f" ×{k}" if k > 1 else "") for h, k in list(instead.get(w, {}).items())[:3]
        )
        lines.append(f"| {w} | {heard} | " + " | ".join(cells) + f" | {wrong} |")
    return [*lines, ""]


def asr_plots(report: dict, out: Path) -> list[Path]:
    """WER per test set, one bar per system, one PNG."""
    plt = pyplot()
    if plt is None:
        return []
    import numpy as np

    from edgessm.atomic import atomic_path

    sets = list(report["sets"])
    systems = sorted({name for s in report["sets"].values() for name in s}, key=lambda n: (n != report["model"], n))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(sets)), 4))
    width = 0.8 / max(1, len(systems))
    for i, name in enumerate(systems):
        wers = [100 * report["sets"][s][name]["wer"] if name in report["sets"][s] else np.nan for s in sets]
        ax.bar(np.arange(len(sets)) + (i - (len(systems) - 1) / 2) * width, wers, width, label=name)
    ax.set_xticks(np.arange(len(sets)), sets, rotation=15)
    ax.set_ylabel("WER (%)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    ax.set_title("Word error rate on held-out audio (lower is better)")
    fig.tight_layout()
    path = out / "asr_wer.png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return [path]
