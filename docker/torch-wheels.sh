#!/bin/sh
# The family's +cpu torch builds from a CPU index (download.pytorch.org/whl/cpu or the one
# SAGEMAKER_EMULATOR_TORCH_INDEX names), for the Python that $PIP installs into.
#
#   PIP="python -m pip --python /opt/venv/bin/python" torch-wheels.sh INDEX REQUIREMENTS CONSTRAINTS DEST
#
# Such an index is a PEP 503 HTML index without upload times, which pip's --uploaded-prior-to
# refuses, so (as the process backend's layers do: emulator/backends/layers.py _install_from_index):
# resolve REQUIREMENTS (torch==X+cpu and its torchvision/torchaudio, some unpinned) against the
# index and pip's own index together, undated; download exactly the torch, torchvision and
# torchaudio that resolved from INDEX into DEST; and write their pins to DEST/pins.txt. The image's
# first pip run then installs those pins from DEST (--find-links: pip checks no date on local
# files) with what they need from PyPI, dated as the rest of the image.
#
# An http:// index (a mirror the user named) is passed as --trusted-host too: pip ignores plain-HTTP
# indexes other than localhost's otherwise, while the probe that chose it found it answering.
set -eu
index=$1 requirements=$2 constraints=$3 dest=$4
trust=""
case "$index" in
    http://*) host=${index#http://}; host=${host%%/*}; trust="--trusted-host ${host%%:*}" ;;
esac
mkdir -p "$dest"
report="$dest/report.json"
$PIP install -q --dry-run --ignore-installed --report "$report" --extra-index-url "$index" $trust \
    -c "$constraints" -r "$requirements"
python3 - "$report" > "$dest/pins.txt" <<'PY'
import json, re, sys
wanted = ("torch", "torchvision", "torchaudio")
for item in json.load(open(sys.argv[1])).get("install", []):
    meta = item["metadata"]
    if re.sub(r"[-_.]+", "-", meta["name"]).lower() in wanted:
        print(f"{meta['name']}=={meta['version']}")
PY
rm -f "$report"
$PIP download -q --no-deps --dest "$dest" --index-url "$index" $trust -r "$dest/pins.txt"
