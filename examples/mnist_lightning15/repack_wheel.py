"""Build ``wheels/pytorch_lightning-1.5.10.post0+nopin-py3-none-any.whl``: PL 1.5.10.post0 without
its ``setuptools==59.5.0`` pin.

Why: PL 1.5.10.post0 requires ``setuptools==59.5.0`` and torch 2.13 requires
``setuptools>=77.0.3``; pip cannot resolve both, and a requirements file cannot say ``--no-deps``.
The repacked wheel is byte-for-byte the released code with one ``Requires-Dist`` line removed and a
local version label (``+nopin``) so that nobody mistakes it for the release. Run once, before the
job (needs PyPI): ``python examples/mnist_lightning15/repack_wheel.py``.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

RELEASE = "1.5.10.post0"
LOCAL = f"{RELEASE}+nopin"
WHEELS = Path(__file__).resolve().parent / "wheels"
TARGET = WHEELS / f"pytorch_lightning-{LOCAL}-py3-none-any.whl"
DROPPED = "Requires-Dist: setuptools==59.5.0"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def repack(source: Path, target: Path = TARGET) -> Path:
    """Rewrite the released wheel ``source`` into ``target`` (see the module docstring)."""
    old_info = f"pytorch_lightning-{RELEASE}.dist-info/"
    new_info = f"pytorch_lightning-{LOCAL}.dist-info/"
    records: list[str] = []
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            name = item.filename
            if name == old_info + "RECORD":
                continue
            data = src.read(item)
            if name.startswith(old_info):
                name = new_info + name[len(old_info):]
                if name.endswith("METADATA"):
                    text = data.decode()
                    text = text.replace(f"Version: {RELEASE}\n", f"Version: {LOCAL}\n", 1)
                    text = "".join(line for line in text.splitlines(keepends=True)
                                   if line.rstrip("\n") != DROPPED)
                    data = text.encode()
            dst.writestr(name, data)
            records.append(_record_line(name, data))
        records.append(f"{new_info}RECORD,,")
        dst.writestr(new_info + "RECORD", "\n".join(records) + "\n")
    partial.replace(target)
    return target


def ensure() -> Path:
    """The repacked wheel, building it (one ``pip download``) if it is not there yet."""
    if TARGET.is_file():
        return TARGET
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--disable-pip-version-check", "--only-binary", ":all:",
                        f"pytorch-lightning=={RELEASE}", "-d", tmp], check=True)
        (wheel,) = Path(tmp).glob("pytorch_lightning-*.whl")
        return repack(wheel)


if __name__ == "__main__":
    print(ensure())
