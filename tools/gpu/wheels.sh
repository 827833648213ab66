#!/usr/bin/env bash
# Here: the project's Python packages that the device machine's image lacks, as CPython 3.12 x86-64 wheels in
# .whl/ at the versions pinned in constraints.txt (the image has torch, numpy, scipy, onnx, onnxruntime,
# safetensors, numba, scikit-learn, matplotlib; /work/.library/device/KINDS.md lists it). About 15 MB.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
names=(soundfile cffi pycparser soxr librosa audioread pooch decorator platformdirs lazy-loader pyroomacoustics)
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
mkdir -p .whl
for name in "${names[@]}"; do
    pin=$(grep -i "^${name}==" constraints.txt || true)
    [ -n "$pin" ] || { echo "wheels.sh: $name has no pin in constraints.txt" >&2; exit 1; }
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" -d .whl "$pin"
done
du -sh .whl
