#!/usr/bin/env bash
# On the device machine (run through the device tool from the repository root): train RECIPE for MIN minutes on
# the GPU from a data pack, optionally from initial weights, and copy what a session needs back to $OUT: the
# final weights, the config, the log and the last checkpoint (to resume here or in the next GPU session).
#
#   bash tools/gpu/train.sh RECIPE MIN PACK INIT [--set SECTION.KEY=VALUE ...]
#
# PACK: a folder made by `edgessm pack` (carried); INIT: a .safetensors file, a run folder, or `none`;
# `RESUME=DIR` continues a run folder instead (carried, from an earlier call's checkpoint). Wheels of the
# packages the image lacks come from .whl/ (tools/gpu/wheels.sh). Tried here with
# `DEVICE=cpu PYTHON=.venv/bin/python OUT=/tmp/o bash tools/gpu/train.sh RECIPE 1 PACK none --steps 3`.
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,11p' "$0"; exit 2; }
recipe=$1 minutes=$2 pack=$3 init=$4
shift 4
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
py=${PYTHON:-python3}
deps=/tmp/edgessm-deps
if compgen -G ".whl/*.whl" > /dev/null && "$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
    "$py" -m pip install --quiet --no-index --no-deps --target "$deps" .whl/*.whl
fi
export PYTHONPATH="$PWD:$deps${PYTHONPATH:+:$PYTHONPATH}"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
run=${RUN:-/tmp/edgessm-run}
args=(--device "${DEVICE:-cuda}" --pack "$pack" --out "$run" --no-progress --set "train.time_limit_min=$minutes")
if [ -n "${RESUME:-}" ]; then
    mkdir -p "$run" && cp -r "$RESUME"/. "$run"/ && args+=(--resume)
elif [ "$init" != none ]; then
    args+=(--init "$init")
fi
rc=0
# the time limit ends the run and its schedule; the margin covers start-up, the final validation and export
timeout $(( (minutes + 4) * 60 )) "$py" -m edgessm.cli train "$recipe" "${args[@]}" "$@" || rc=$?
for f in model.safetensors model.json config.json log.csv checkpoints/last.pt; do
    [ -f "$run/$f" ] && cp "$run/$f" "$out/"
done
ls -la "$out"
exit $rc
