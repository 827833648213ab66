"""``edgessm eval``: measure a shipped model or an exported graph on held-out data (no torch).

edgessm eval kws35                          # every keyword-spotting set, the fp32 graph
edgessm eval kws35 --int8 --sets sc-test    # the int8 graph on the Speech Commands test clips
edgessm eval my.onnx --out reports/my       # report.json, report.md and plots in reports/my
edgessm eval kws35 --choose-threshold       # pick the decision threshold on validation streams (no test data)
edgessm eval kws35-es --budget 4            # an elastic (ES-SSM) model's graph at compute budget 4
edgessm eval kws35-es --budget-sweep --out reports/es   # accuracy and RTF at every exported budget (table + plot)
edgessm eval denoise --out reports/dn       # PESQ/STOI/SI-SDR/DNSMOS + RTF vs RNNoise and DeepFilterNet3, one run
edgessm eval asr --out reports/asr          # WER/CER/RTF vs pocketsphinx on held-out speech, streaming latency
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from edgessm.atomic import write_text

from .asr import SETS as ASR_SETS

KWS_SETS = ("sc-test", "sc-validation", "synth-test", "fsdd", "streams", "read-speech")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("model", help="shipped model name, model folder or path to an exported .onnx graph")
    ap.add_argument("--int8", action="store_true", help="the int8 graph of a shipped model")
    ap.add_argument("--sets", help=f"comma-separated; keyword spotters: {', '.join(KWS_SETS)} (default: all; sc-test "
                                   f"with --budget-sweep); recognizers: {', '.join(ASR_SETS)}")  # fmt: skip
    ap.add_argument("--budget", metavar="K", help="elastic (ES-SSM) models: evaluate the graph at compute budget K")
    ap.add_argument(
        "--budget-sweep",
        action="store_true",
        help="elastic models: clip accuracy and single-thread RTF of every budget graph (Markdown table; with "
        "--out also report.json, report.md and budget_sweep.png)",
    )
    ap.add_argument("--budgets", help="budgets of the sweep, e.g. 2,4,8,32 (default: every exported budget)")
    ap.add_argument("--compare", nargs="+", metavar="[NAME=]MODEL",
                    help="more models on the same audio: elastic models swept alongside (e.g. the ablations), "
                         "or more denoisers scored in the same run; each named by its folder or file, or by "
                         "NAME (e.g. v2=models/denoise)")  # fmt: skip
    ap.add_argument("--rtf-seconds", type=float, default=20.0, help="audio per RTF measurement of the sweep (0: none)")
    ap.add_argument("--keywords-per-background", type=int, default=150,
                    help="keywords placed in each of the speech, music and noise test streams")  # fmt: skip
    ap.add_argument("--keyword-free-hours", type=float, default=1.0, help="audio for false accepts per hour")
    ap.add_argument("--thresholds", default="0.5,0.6,0.7,0.8,0.85,0.9,0.95", help="decision thresholds to sweep")
    ap.add_argument("--threshold", type=float, help="the operating point to headline (default: the graph's)")
    ap.add_argument("--smooth", type=int, default=4, help="frames of posterior smoothing (as in listen)")
    ap.add_argument("--refractory", type=float, default=1.0, help="seconds after a detection with no other")
    ap.add_argument("--contrast", type=float, metavar="DB",
                    help="keyword spotters: the contrast gate (a keyword must stand DB above the second before it; "
                         "0: off; default: the graph's, as in listen)")  # fmt: skip
    ap.add_argument("--speech-after", type=float, metavar="P",
                    help="keyword spotters: the speech-after gate (mean _unknown_ posterior 0.1-0.4 s after a "
                         "keyword at most P; 0: off; default: the graph's, as in listen)")  # fmt: skip
    ap.add_argument("--hold", type=float, metavar="S",
                    help="keyword spotters: the hold (the strongest keyword within S seconds of a crossing fires; "
                         "0: off; default: the graph's, as in listen)")  # fmt: skip
    ap.add_argument("--margin", type=float, metavar="P",
                    help="keyword spotters: the runner-up margin (a keyword must stand P above every other keyword's "
                         "posterior; 0: off; default: the graph's, as in listen)")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0, help="seed of the test streams")
    ap.add_argument(
        "--choose-threshold",
        action="store_true",
        help="sweep thresholds on validation streams (synthetic validation voices, new music/noise) and "
        "print the lowest one within --max-fa false accepts per hour; uses no test data",
    )
    ap.add_argument("--max-fa", type=float, default=0.5,
                    help="false accepts per hour allowed by --choose-threshold and --calibrate")  # fmt: skip
    ap.add_argument(
        "--calibrate",
        action="store_true",
        help="per-keyword thresholds within --max-fa false accepts per hour on validation streams (real validation "
        "speakers, keyword-free validation audio; no test data): calibration.json for `edgessm export "
        "--class-thresholds`, a DET plot and table (with --out)",
    )
    ap.add_argument("--calibration-hours", type=float, default=2.0, help="keyword-free audio for --calibrate")
    ap.add_argument("--peers", help="peers scored in the same run: denoisers rnnoise,dfn3 (default both; also oracle, "
                                    "oracle-wiener: the ideal mask at the spectral network's resolution; oracle-df: "
                                    "that mask with the clean spectrum in the 32 deep-filter bins); recognizers "
                                    "pocketsphinx (default), whisper (Whisper tiny.en, not streaming); 'none' for "
                                    "none")  # fmt: skip
    ap.add_argument("--per-speaker", type=int, default=2, help="denoisers: test mixtures per held-out speaker")
    ap.add_argument("--mixtures", choices=("test", "validation"), default="test",
                    help="denoisers: the held-out test mixtures (default), or the same kinds built from the "
                         "validation speakers and noises, to tune a choice without touching the test")  # fmt: skip
    ap.add_argument("--mixture-level", type=float, default=-25.0, metavar="DBFS",
                    help="denoisers: the mixtures' RMS level (default -25; -45: a quiet microphone)")  # fmt: skip
    ap.add_argument("--noise-kinds", metavar="K1,K2",
                    help="denoisers: the noise kinds of the mixtures (default the seven of every report: "
                         "dude_miaowing,running_tap,babble,music,hum,pink,white; also everyday: recorded everyday "
                         "sound of the ambience packages' held-out recordings, make ambience; music-phone: the music "
                         "through a phone line, 300-3400 Hz and 8-bit mu-law)")  # fmt: skip
    ap.add_argument("--lm", metavar="NPZ",
                    help="recognizers: also score ours with beam search over this word model (edgessm lm; "
                         "default and 'auto': the one the model ships, as transcribe decodes files; 'none': greedy "
                         "only; --beam, --lm-weight, --word-bonus as in transcribe)")  # fmt: skip
    ap.add_argument("--beam", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--lm-weight", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--word-bonus", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--open-vocabulary", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=int, default=0,
                    help="denoisers: only the first N mixtures; recognizers: at most N utterances per set")  # fmt: skip
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="folder for report.json, report.md and plots (default: print only)")
    ap.add_argument("--no-progress", action="store_true")


def compare_name(item: str) -> tuple[str | None, str]:
    """``--compare`` item -> ``(name, model)``: ``NAME=MODEL`` names a system (``v2=models/denoise``); a plain
    model (or a path that exists, even with ``=`` in it) is named later by its folder or file."""
    name, sep, model = item.partition("=")
    if not sep or not name or not model or "/" in name or Path(item).exists():
        return None, item
    return name, model


def _progress(enabled: bool):
    def wrap(items, desc):
        if not enabled:
            return items
        from tqdm import tqdm

        return tqdm(items, desc=desc, unit="item", leave=False)

    return wrap


def _sets(spec: str | None, known: tuple[str, ...], check: bool = True) -> list[str]:
    sets = [s.strip() for s in (spec or ",".join(known)).split(",") if s.strip()]
    unknown = set(sets) - set(known)
    if unknown and check:
        raise SystemExit(f"edgessm eval: unknown sets {sorted(unknown)}; choose from {', '.join(known)}")
    return sets


def run(args: argparse.Namespace) -> int:
    from edgessm.data.music import music_source
    from edgessm.runtime.kws import check_gates, graph_decision
    from edgessm.runtime.registry import check_budget, resolve_graph
    from edgessm.runtime.session import StepModel

    from . import backgrounds, kws
    from .report import kws_markdown, kws_plots

    progress = _progress(not args.no_progress and sys.stderr.isatty())
    sets = _sets(args.sets, KWS_SETS, check=False)  # checked once the graph's task is known
    if args.budget_sweep:
        return _budget_sweep(args, sets if args.sets else ["sc-test"], progress)
    if args.budgets:
        raise SystemExit("edgessm eval: --budgets goes with --budget-sweep")
    try:
        check_gates(args.contrast, args.speech_after, hold_s=args.hold, margin=args.margin)
        path = resolve_graph(args.model, int8=args.int8, budget=args.budget)
        model = StepModel(path, threads=args.threads)
        check_budget(model.info.extra, args.budget, path.name)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"edgessm eval: {e}") from None
    if model.info.task == "denoise":
        return _denoise(model, path, args, progress)
    if args.compare:
        raise SystemExit("edgessm eval: --compare goes with --budget-sweep or a denoiser")
    if model.info.task == "asr":
        return _asr(model, path, args, progress)
    if model.info.task != "kws":
        kind = model.info.task or "untyped"
        raise SystemExit(f"edgessm eval: {path} is a {kind} graph; kws, denoise and asr graphs are evaluated")
    _sets(args.sets, KWS_SETS)
    if args.choose_threshold:
        return _choose_threshold(model, args, progress)
    if args.calibrate:
        return _calibrate(model, args, progress)
    threshold = args.threshold or float(model.info.extra.get("threshold", 0.7))
    report: dict = {"graph": _shown(path), "weights_sha256": model.info.weights_sha256, "chunk": model.info.chunk,
                    "int8": "quantization" in model.info.extra, "clips": {}, "threshold": threshold}  # fmt: skip
    shipped = graph_decision(model.info.extra, args.threshold, args.smooth, args.refractory, contrast_db=args.contrast,
                             speech_after=args.speech_after, hold_s=args.hold, margin=args.margin)  # fmt: skip
    report["contrast_db"] = shipped.contrast_db
    report["speech_after"] = shipped.speech_after
    report["hold_s"] = shipped.hold_s
    report["margin"] = shipped.margin
    calibrated = shipped if shipped.class_thresholds else None
    if calibrated is not None:
        report["decision"] = "calibrated"
        report["class_thresholds"] = calibrated.class_thresholds
    if "budget" in model.info.extra:
        report["budget"] = int(model.info.extra["budget"])
    results = {}
    for name in sets:
        if name in ("streams", "read-speech"):
            continue
        try:
            res = kws.evaluate_clips(model, name, progress)
        except (FileNotFoundError, ValueError) as e:
            print(f"edgessm eval: skipping {name}: {e}", file=sys.stderr)
            continue
        results[name] = res
        report["clips"][name] = {"accuracy": res.accuracy(), "clips": len(res.refs), "sc12": res.sc12(),
                                 "per_word": res.per_word()}  # fmt: skip
        print(f"{name}: {res.accuracy():.2%} of {len(res.refs)} clips (12-class {res.sc12()['accuracy']:.2%})",
              file=sys.stderr)  # fmt: skip
    thresholds = sorted({*(float(t) for t in args.thresholds.split(",")), threshold})
    cfg = replace(shipped, threshold=threshold, class_thresholds={})
    if "read-speech" in sets:  # running read speech with transcripts: keywords the readers did not say
        try:
            for key, levels in (("read_speech", "everyday"), ("read_speech_loud", "loud")):
                speech = kws.read_speech(seed=args.seed, level_dbfs=kws.READ_LEVELS[levels])
                report[key] = {**kws.read_speech_false_accepts(model, speech, thresholds, cfg, progress),
                               "level_dbfs": list(kws.READ_LEVELS[levels])}  # fmt: skip
        except (FileNotFoundError, ValueError) as e:
            print(f"edgessm eval: skipping read-speech: {e}", file=sys.stderr)
    if "streams" in sets:
        streams = kws.keyword_streams(args.keywords_per_background, args.seed)
        free = kws.keyword_free_hour(3600 * args.keyword_free_hours, args.seed + 1)
        report["streams"] = kws.stream_metrics(model, streams, free, thresholds, cfg, progress, calibrated)
        report["streams"]["music"] = music_source("test")
        report["streams"]["speech_pool"] = backgrounds.speech_pool("real")
        # a user's session: real speakers, short pauses, a quiet room (hit rate; no keyword-free audio)
        sessions = kws.session_streams(seed=args.seed)
        report["sessions"] = kws.stream_metrics(model, sessions, [], thresholds, cfg, progress, calibrated)
        # the same ten-command session at a quiet microphone (the input level control's job), at the decision
        report["quiet_sessions"] = kws.stream_metrics(model, kws.quiet_sessions(sessions), [], [threshold], cfg,
                                                      progress)  # fmt: skip
        report["quiet_sessions"]["gain_db"] = kws.QUIET_DB
        # and at a close microphone (the level control's cut lowers loud input)
        report["loud_sessions"] = kws.stream_metrics(model, kws.loud_sessions(sessions), [], [threshold], cfg,
                                                     progress)  # fmt: skip
        report["loud_sessions"]["gain_db"] = kws.LOUD_DB
    return _write_report(report, kws_markdown, kws_plots, args.out)


def _denoise(model, path: Path, args: argparse.Namespace, progress) -> int:
    from edgessm.data.music import music_source
    from edgessm.runtime.registry import resolve_graph
    from edgessm.runtime.session import StepModel

    from . import denoise
    from .peers import Peer
    from .report import denoise_markdown, denoise_plots

    if args.sets:
        raise SystemExit("edgessm eval: --sets is for keyword spotters; a denoiser has one test set")
    try:
        kinds = args.noise_kinds.split(",") if args.noise_kinds else denoise.NOISE_KINDS
        if not -80 <= args.mixture_level <= -3:
            raise ValueError(f"--mixture-level is an RMS level in dBFS, -80 to -3, got {args.mixture_level:g}")
        mixtures = denoise.mixtures(args.mixtures, args.per_speaker, args.seed, kinds=kinds,
                                    level_dbfs=args.mixture_level)[: args.limit or None]  # fmt: skip
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"edgessm eval: {e}") from None
    name = model.info.extra.get("model_name", path.stem)
    systems = {"noisy": lambda x: x, name: denoise.graph_system(model)}
    latency = {name: 1000 * model.info.latency_samples / model.info.sample_rate}
    for item in args.compare or []:  # more denoisers on the same mixtures, named by NAME= or their folder or file
        label, other = compare_name(item)
        try:
            other_path = resolve_graph(other, int8=args.int8)
            other_model = StepModel(other_path, threads=args.threads)
        except (FileNotFoundError, ValueError) as e:
            raise SystemExit(f"edgessm eval: {e}") from None
        if other_model.info.task != "denoise":
            raise SystemExit(f"edgessm eval: --compare {other} is a {other_model.info.task or 'untyped'} graph, "
                             "not a denoiser")  # fmt: skip
        key = label or (Path(other).name if Path(other).is_dir() else other_path.stem)
        if key in systems:
            raise SystemExit(f"edgessm eval: two systems named {key!r}; name one: --compare NAME={other}")
        systems[key] = denoise.graph_system(other_model)
        latency[key] = 1000 * other_model.info.latency_samples / other_model.info.sample_rate
    twin = _int8_twin(args.model, path) if not args.int8 else None
    if twin is not None:  # the int8 graph beside the fp32 one is scored in the same run: its quality change
        systems[f"{name} int8"] = denoise.graph_system(StepModel(twin, threads=args.threads))
        latency[f"{name} int8"] = latency[name]
    peers = [p.strip() for p in (args.peers or "rnnoise,dfn3").split(",") if p.strip() and p.strip() != "none"]
    for key in peers:
        if key in ("oracle", "oracle-wiener", "oracle-df"):  # diagnostics: the ideal mask of the shipped layout
            exponent = 1.0 if key == "oracle-wiener" else 0.5
            systems[key] = denoise.oracle_system(mixtures, exponent, exact_bins=32 if key == "oracle-df" else 0)
            latency[key] = latency[name]
            continue
        try:
            peer = Peer(key, mixtures[0].clean)
        except (RuntimeError, ValueError) as e:
            raise SystemExit(f"edgessm eval: {e}") from None
        systems[peer.name] = peer
        latency[peer.name] = 1000 * peer.delay / denoise.SAMPLE_RATE
        print(f"{peer.name}: output delay {peer.delay} samples, compensated", file=sys.stderr)
    results = denoise.evaluate(systems, mixtures, progress)
    for n, r in results.items():
        r.latency_ms = latency.get(n)
    report = {"graph": _shown(path), "weights_sha256": model.info.weights_sha256, "model": name,
              "chunk": model.info.chunk, "int8": "quantization" in model.info.extra, "mixtures": len(mixtures),
              "speakers": len({m.speaker for m in mixtures}), "seed": args.seed, "split": args.mixtures,
              "music": music_source(args.mixtures), "noise_kinds": list(kinds), "level_dbfs": args.mixture_level,
              "params": int(model.info.extra.get("params", 0)) or None,
              "flops_per_second": float(model.info.extra.get("flops_per_second", 0)) or None,
              "systems": denoise.summary(results)}  # fmt: skip
    return _write_report(report, denoise_markdown, denoise_plots, args.out)


def _asr(model, path: Path, args: argparse.Namespace, progress) -> int:
    from edgessm.runtime.registry import shipped_lm
    from edgessm.runtime.session import StepModel
    from edgessm.runtime.transcribe import beam_decoder, word_model

    from . import asr
    from .report import asr_markdown, asr_plots

    sets = _sets(args.sets, ASR_SETS)
    peers = [p.strip() for p in (args.peers or "pocketsphinx").split(",") if p.strip() and p.strip() != "none"]
    if set(peers) - {"pocketsphinx", "whisper"}:
        raise SystemExit(f"edgessm eval: unknown recognizer peers {sorted(set(peers) - {'pocketsphinx', 'whisper'})}; "
                         "choose from pocketsphinx, whisper (Whisper tiny.en) or none")  # fmt: skip
    name = model.info.extra.get("model_name", path.stem)
    systems: dict = {name: asr.GraphRecognizer(model)}
    try:  # as transcribe decodes: the word model the folder ships unless --lm says otherwise
        if args.lm == "auto" and shipped_lm(path) is None:
            raise FileNotFoundError(f"--lm auto: {path.parent} ships no word model (lm.npz)")
        lm = word_model(argparse.Namespace(lm=None if args.lm == "auto" else args.lm), path)
        rescorer = beam_decoder(model.info.labels, args, lm, path) if lm else None
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"edgessm eval: {e}") from None
    if rescorer is not None:
        systems[f"{name} beam+LM"] = asr.GraphRecognizer(model, rescorer=rescorer)
    twin = _int8_twin(args.model, path) if not args.int8 else None
    if twin is not None:
        systems[f"{name} int8"] = asr.GraphRecognizer(StepModel(twin, threads=args.threads))
    try:
        if "pocketsphinx" in peers:
            systems["pocketsphinx"] = asr.PocketSphinx()
        if "whisper" in peers:
            systems["whisper tiny.en"] = asr.WhisperTiny()
    except RuntimeError as e:
        raise SystemExit(f"edgessm eval: {e}") from None
    report: dict = {"graph": _shown(path), "weights_sha256": model.info.weights_sha256, "model": name,
                    "int8": "quantization" in model.info.extra, "chunk": model.info.chunk,
                    "params": int(model.info.extra.get("params", 0)) or None,
                    "flops_per_second": float(model.info.extra.get("flops_per_second", 0)) or None,
                    "sets": {}}  # fmt: skip
    sentences = []
    for set_name in sets:
        try:
            utts = asr.test_set(set_name, args.limit, args.seed)
        except (FileNotFoundError, ValueError) as e:
            print(f"edgessm eval: skipping {set_name}: {e}", file=sys.stderr)
            continue
        these = dict(systems)
        if set_name in asr.CLOSED:  # both told the set's vocabulary (commands, digits): pocketsphinx's own turf
            words = asr.vocabulary(set_name, utts)
            one = all(len(u.text.split()) == 1 for u in utts)  # single words: both told "one word per clip"
            these[f"{name} words"] = asr.GraphRecognizer(model, vocabulary=words, one_word=one)
            if "pocketsphinx" in peers:
                these["pocketsphinx grammar"] = asr.PocketSphinx(words, one_word=one)
        results = asr.evaluate(these, utts, set_name, progress)
        report["sets"][set_name] = {n: r.summary() for n, r in results.items()}
        print(f"{set_name}: " + ", ".join(f"{n} WER {r.wer:.1%}" for n, r in results.items()), file=sys.stderr)
        if set_name.endswith("sentences"):
            sentences += utts
    if sentences:
        from edgessm.runtime.ctc import EndpointConfig

        report["latency"] = {**asr.latencies(model, sentences), "pause_s": EndpointConfig().trailing_silence_s}
    return _write_report(report, asr_markdown, asr_plots, args.out)


def _shown(path: Path) -> str:
    """The graph's path as a report records it: relative to the working folder when inside it (a report
    committed beside a model then names it as the repository does), else absolute."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _int8_twin(model: str, path: Path) -> Path | None:
    """The int8 graph that ships beside ``path`` (a shipped model or model folder), if any."""
    from edgessm.runtime.registry import resolve_graph

    try:
        twin = resolve_graph(model, int8=True)
    except (FileNotFoundError, ValueError):
        return None
    return twin if twin != path and twin.is_file() else None


def _write_report(report: dict, markdown, plots, out: str | None) -> int:
    """Print the Markdown tables; with ``out``, write report.json, report.md and the plots there."""
    md = markdown(report)
    print(md)
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        write_text(folder / "report.json", json.dumps(report, indent=1))
        write_text(folder / "report.md", md)
        for f in plots(report, folder):
            print(f"wrote {f}", file=sys.stderr)
        print(f"wrote {folder / 'report.json'} and {folder / 'report.md'}", file=sys.stderr)
    return 0


def _budget_sweep(args: argparse.Namespace, sets: list[str], progress) -> int:
    from edgessm.runtime.registry import budget_graphs, model_folder, parse_budgets
    from edgessm.runtime.session import StepModel

    from .budget import sweep, sweep_markdown, sweep_plot

    if args.budget is not None:
        raise SystemExit("edgessm eval: --budget-sweep runs every budget; --budget picks one (use --budgets)")
    if "streams" in sets:
        raise SystemExit("edgessm eval: --budget-sweep measures clip sets only (sc-test, synth-test, fsdd)")
    models = []
    items = [(None, args.model), *(compare_name(item) for item in args.compare or [])]
    for label, item in items:
        try:
            graphs = budget_graphs(item, int8=args.int8)
            if args.budgets:
                wanted = parse_budgets(args.budgets, max(graphs))
                missing = [k for k in wanted if k not in graphs]
                if missing:
                    raise ValueError(
                        f"{item} has no graph at budget {missing[0]} (exported: {', '.join(map(str, graphs))}); "
                        f"write them with `edgessm export MODEL --out DIR --budget {args.budgets}`"
                    )
                graphs = {k: graphs[k] for k in wanted}
            info = StepModel(next(iter(graphs.values()))).info
        except (FileNotFoundError, ValueError) as e:
            raise SystemExit(f"edgessm eval: {e}") from None
        if info.task != "kws":
            raise SystemExit(f"edgessm eval: {item} is a {info.task or 'non-keyword'} model; only kws is evaluated")
        models.append((label or model_folder(item).name, graphs))
    labels = [m for m, _ in models]
    if len(set(labels)) < len(labels):  # same folder names: the paths as given
        models = [(label or item, g) for (label, item), (_, g) in zip(items, models, strict=True)]
    report = sweep(models, sets, args.rtf_seconds, args.threads, progress,
                   log=lambda msg: print(msg, file=sys.stderr, flush=True))  # fmt: skip
    md = sweep_markdown(report)
    print(md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "report.json", json.dumps({"budget_sweep": report}, indent=1))
        write_text(out / "report.md", md)
        plot = sweep_plot(report, out)
        if plot is not None:
            print(f"wrote {plot}", file=sys.stderr)
        print(f"wrote {out / 'report.json'} and {out / 'report.md'}", file=sys.stderr)
    return 0


def _choose_threshold(model, args: argparse.Namespace, progress) -> int:
    from edgessm.runtime.kws import graph_decision

    from . import kws
    from .report import kws_markdown

    thresholds = sorted({float(t) for t in args.thresholds.split(",")})
    streams = kws.keyword_streams(args.keywords_per_background, args.seed + 100, source="synth-validation")
    free = kws.keyword_free_hour(3600 * args.keyword_free_hours, args.seed + 101, "synth-validation")
    # the graph's gates (or --contrast's and --speech-after's): the threshold is chosen for the decision it ships with
    cfg = graph_decision(model.info.extra, thresholds[0], args.smooth, args.refractory, contrast_db=args.contrast,
                         speech_after=args.speech_after, hold_s=args.hold, margin=args.margin)  # fmt: skip
    metrics = kws.stream_metrics(model, streams, free, thresholds, cfg, progress)
    metrics["keyword_source"] = "synth-validation"
    chosen = kws.pick_threshold(metrics["sweep"], args.max_fa)
    if chosen is None:
        verdict = f"no swept threshold keeps false accepts within {args.max_fa}/h; sweep higher thresholds"
    else:
        verdict = f"chosen threshold: {chosen} (lowest with <= {args.max_fa} false accepts/h on validation streams)"
    md = kws_markdown({"streams": metrics}) + "\n" + verdict + "\n"
    print(md, end="")
    if args.out:  # the evidence for a graph's default threshold, kept beside its evaluation
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        report = {"threshold_validation": metrics, "max_fa_per_hour": args.max_fa, "chosen": chosen}
        write_text(out / "threshold-validation.json", json.dumps(report, indent=1))
        write_text(out / "threshold-validation.md", md)
        print(f"wrote {out / 'threshold-validation.json'} and {out / 'threshold-validation.md'}", file=sys.stderr)
    return 1 if chosen is None else 0


FA_BUDGETS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)


def _calibrate(model, args: argparse.Namespace, progress) -> int:
    """Per-keyword thresholds on validation streams, checked with the live decider at every budget (with the
    graph's gates, or ``--contrast``'s and ``--speech-after``'s; the allocation itself does not model them)."""
    from edgessm.runtime.kws import graph_decision

    from . import calibrate, kws
    from .report import calibration_markdown, calibration_plot

    words = calibrate.validation_keywords(seed=args.seed)
    streams = calibrate.validation_streams(words, seed=args.seed)
    free = calibrate.validation_free(args.calibration_hours, seed=args.seed)
    budgets = sorted({*FA_BUDGETS, args.max_fa})
    logits = kws.stream_logits(model, streams + free, progress)
    cal = calibrate.calibrate(model, streams, free, budgets, args.smooth, args.refractory, logits)
    # the graph's gates (or the options'), one threshold
    base = graph_decision(model.info.extra, 0.5, args.smooth, args.refractory, contrast_db=args.contrast,
                          speech_after=args.speech_after, hold_s=args.hold, margin=args.margin)  # fmt: skip
    gate = base.contrast_db
    thresholds = sorted({*(float(t) for t in args.thresholds.split(",")), 0.97, 0.98, 0.99, 0.995})
    single = kws.stream_metrics(model, streams, free, thresholds, base, logits=logits)
    checked = []
    for budget in budgets:
        cfg = replace(base, class_thresholds=cal["budgets"][budget])
        row = kws.stream_metrics(model, streams, free, [], base, calibrated=cfg, logits=logits)["sweep"][0]
        checked.append({**row, "budget": budget, "threshold": "calibrated"})
    report = {"validation_keywords": len(words), "keyword_free_hours": cal["keyword_free_hours"],
              "max_fa_per_hour": args.max_fa, "chosen": cal["budgets"][args.max_fa], "calibrated": checked,
              "single": single["sweep"], "allocation": cal, "contrast_db": gate,
              "speech_after": base.speech_after, "speech_pool": calibrate.validation_speech_pool()}  # fmt: skip
    md = calibration_markdown(report)
    if gate is not None:
        md += f"\nDecisions with the contrast gate at {gate:g} dB (the allocation above does not model it).\n"
    if base.speech_after is not None:
        md += (f"\nDecisions with the speech-after gate at {base.speech_after:g} (the allocation above does not "
               "model it).\n")  # fmt: skip
    print(md, end="")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "calibration.json", json.dumps(report, indent=1))
        write_text(out / "calibration.md", md)
        calibration_plot(report, out / "det-validation.png")
        print(f"wrote {out / 'calibration.json'}, calibration.md and det-validation.png", file=sys.stderr)
    return 0
