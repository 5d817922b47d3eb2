#!/usr/bin/env bash
# The wheels benchmarks/gpu_suite.py needs on the lent GPU machine (Python 3.12 with torch 2.11,
# transformers, accelerate, timm, safetensors, tokenizers, huggingface_hub; no internet, no diffusers,
# open_clip or ftfy), at this repository's locked versions, into .whl/ (ignored by git; the device
# call carries it), plus .whl/COMMIT: the commit the suite measures (the machine gets no .git).
#   make gpu-wheels            (PY=.venv/bin/python; benchmarks/README.md, "On the lent GPU")
# transformers and peft travel too, so the suite runs the lock's versions (the image's may be older;
# transformers checks regex's version at import, so regex travels with it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PKGS="diffusers transformers peft open-clip-torch ftfy wcwidth importlib-metadata lazy-importer regex"
pins=()
for p in $PKGS; do
  pin=$(grep -i -m1 "^${p}==" scripts/requirements.lock | cut -d' ' -f1) || true
  if [ -z "$pin" ]; then echo "gpu-wheels: $p is not in scripts/requirements.lock" >&2; exit 1; fi
  pins+=("$pin")
done
rm -rf .whl
mkdir -p .whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "${pins[@]}"
{ git rev-parse HEAD; [ -z "$(git status --porcelain --untracked-files=no)" ] || echo "(uncommitted changes)"; } > .whl/COMMIT
n=$(ls .whl/*.whl | wc -l)
echo "gpu-wheels: $n wheels, $(du -sh .whl | cut -f1) in .whl/ (${pins[*]}); commit $(head -1 .whl/COMMIT)"
