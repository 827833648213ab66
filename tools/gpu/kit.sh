#!/usr/bin/env bash
# Here: build what one GPU training call carries, under .carry/ (ignored by git, kept out of commits):
#
#   tools/gpu/kit.sh denoise    # .carry/denoise (pack of the denoise_v3 recipe, real clean speech; ~35 MB)
#                               #   + .carry/denoise_init.safetensors (the shipped denoiser, or INIT=...)
#   tools/gpu/kit.sh kws        # .carry/kws (pack of kws_v7; ~50 MB) + .carry/kws_init.safetensors (kws35)
#   MINED=mined.csv tools/gpu/kit.sh kws   # the same with mined hard negatives (edgessm mine) in the pack
#   tools/gpu/kit.sh asr        # .carry/asr (pack of asr_v4_gpu: 8.1 h, the real sentences whole; ~42 MB);
#                               #   the recognizer trains from scratch there (a wider network than asr's)
#
# and the wheels (tools/gpu/wheels.sh). The tree that travels is at most 64 MiB: models/ (~50 MB) does not
# fit beside a pack; tools/gpu/README.md says how a call is made.
set -euo pipefail
cd "$(dirname "$0")/../.."
what=${1:?usage: tools/gpu/kit.sh denoise|kws|asr}
edgessm=${EDGESSM:-.venv/bin/edgessm}
grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >> .git/info/exclude
mkdir -p .carry
[ -d .whl ] || bash tools/gpu/wheels.sh

need_corpora() {  # the synthetic corpora a recipe's pack takes, made here by `edgessm synth`
    for corpus in "$@"; do
        [ -d "$HOME/.cache/edgessm/synth/$corpus" ] || {
            echo "kit.sh: the synthetic corpus '$corpus' is missing (README: 'Kokoro voices and blends'," \
                 "models/kws35/README.md says how each was made)" >&2
            exit 1
        }
    done
}

case "$what" in
denoise)
    rm -rf .carry/denoise
    "$edgessm" pack denoise_v3 --out .carry/denoise --level 0.98 --keep sc_train_subset=0.3 --keep picovoice=0.5 \
        --set data.music_max_s=30 --set 'data.sources=["shared:read_speech","shared:sentences_pseudolabeled"]'
    cp "${INIT:-models/denoise/model.safetensors}" .carry/denoise_init.safetensors
    ;;
kws)
    need_corpora default kokoro-words kokoro-kws
    rm -rf .carry/kws
    "$edgessm" pack kws_v7 --out .carry/kws --level 0.97 --keep sc_train_subset=0.75 --keep picovoice=0.5 \
        --keep fsdd=0.2 --keep 'synth:*=0.3' --keep 'synth:espeak-ng=0.15' --keep 'synth:kokoro*=1' \
        --keep real_sentences_pseudolabeled=0.6 --noise-max-s 30 \
        ${MINED:+--set data.mined_negatives=$MINED}   # MINED=CSV of `edgessm mine`: the pack carries them
    cp "${INIT:-models/kws35/model.safetensors}" .carry/kws_init.safetensors
    ;;
asr)
    labels="$HOME/.cache/edgessm/labels/pl8/sentences_pseudolabeled.csv"
    [ -f "$labels" ] || {
        echo "kit.sh: the teacher's transcripts are missing: edgessm label ../shared/data/real_sentences_pseudolabeled" \
             "--max-piece 8 --out $labels (~4 min; models/asr/README.md, v2)" >&2
        exit 1
    }
    need_corpora default kokoro-words
    rm -rf .carry/asr
    "$edgessm" pack asr_v4_gpu --out .carry/asr --level 0.98 --keep sc_train_subset=0.5 --keep fsdd=0.5 \
        --keep 'synth:*=0.4' --keep 'synth:kokoro*=1' --noise-max-s 30
    ;;
*)
    echo "kit.sh: what is '$what'? denoise, kws or asr" >&2
    exit 2
    ;;
esac
du -sh .carry/* .whl
