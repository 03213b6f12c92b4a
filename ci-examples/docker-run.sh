#!/usr/bin/env bash
# A plain `docker run` of a CI image (ci-examples/Dockerfile): an unprivileged container with the
# engine's socket mounted. `--backend auto` (the default) picks the docker backend inside it.
# This is what .ci/containers runs here (case a; case b: the same without the socket, exit 3).
set -euo pipefail
cd "$(dirname "$0")/.."
docker build -f ci-examples/Dockerfile -t sagemaker-emulator-ci .
docker run --rm -v /var/run/docker.sock:/var/run/docker.sock sagemaker-emulator-ci \
  python -m emulator run --entry-point rank_report.py --source-dir /src/tests/scripts --hosts 2 \
    --instance-type ml.p4d.24xlarge --gpus-per-host 1 --profile ci \
    --distribution '{"torch_distributed": {"enabled": true}}' --output-dir /tmp/out
