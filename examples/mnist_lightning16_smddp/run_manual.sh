#!/bin/bash
# Manual proof for issue 15 phase 1: the 2022-style example on the current docker backend, with the
# torch 1.12 family image and the example's wheelhouse baked into a throwaway derived image (the
# lead's integration will mount the wheelhouse instead; the backend is not edited here).
set -euo pipefail
mkdir -p "${WORK:-/tmp/sm-emulator-lightning16-demo}"
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"   # an interpreter with the emulator installed (e.g. .nox/tests/bin/python)
WORK="${WORK:-/tmp/sm-emulator-lightning16-demo}"
TAG=$(python3 docker/build.py --framework 1.12 --print-tag 2>/dev/null | tail -1)
echo "family image: $TAG"
HOUSE=$("$PY" -c "
from pathlib import Path
from emulator import wheelhouse
h = wheelhouse.prepare(Path('examples/mnist_lightning16_smddp/code'), '$TAG')
assert h.resolved, h.error
print(h.folder)")
echo "wheelhouse: $HOUSE ($(ls $HOUSE/wheels | wc -l) files)"
rm -rf "$WORK"/ctx && mkdir -p "$WORK"/ctx && cp -r $HOUSE/wheels "$WORK"/ctx/wheels && cp $HOUSE/pip.conf "$WORK"/ctx/pip.conf
printf 'FROM %s\nCOPY wheels /opt/sm-emulator/wheelhouse\nCOPY pip.conf /etc/pip.conf\n' "$TAG" > "$WORK"/ctx/Dockerfile
docker build -q -t sagemaker-emulator:torch1.12-demo-wheelhouse "$WORK"/ctx
rm -rf "$WORK"/out
time "$PY" -m emulator run --backend docker --image sagemaker-emulator:torch1.12-demo-wheelhouse \
    --entry-point train.py --source-dir examples/mnist_lightning16_smddp/code \
    --hosts 2 --instance-type ml.p4d.24xlarge --gpus-per-host 2 \
    --distribution '{"smdistributed": {"dataparallel": {"enabled": true}}}' \
    --hyperparameters '{"epochs": 2}' --channel training=examples/mnist_lightning16_smddp/data/training \
    --output-dir "$WORK"/out --job-name mnist-lightning16-smddp-demo "$@"
