"""A Hugging Face layer installs as AWS's Dockerfile does: one pip resolution per ``pip install``
command, in order, then what the file uninstalls (``layers._install_steps``, real pip).

The oracle is pip itself: one resolution of requirements that conflict is refused
(ResolutionImpossible), while successive ``pip install`` commands each resolve only what they name,
so a later one may replace what an earlier one installed (pip warns and goes on). AWS's 4.56.2 image
relies on that: its base installs boto3 (which pins botocore), its last command installs
``s3fs==2025.9.0``, whose aiobotocore needs an older botocore. The index is a PEP 503 folder of tiny
wheels (``tests/simple_index.py``), so no network is used.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from emulator.backends import layers
from emulator.job import dlc, frameworks
from tests import simple_index


def _wheels(tmp_path: Path) -> str:
    folder = tmp_path / "wheels"
    made = [simple_index.wheel(folder, "tinycore", "1.0"), simple_index.wheel(folder, "tinycore", "2.0"),
            simple_index.wheel(folder, "tinyboto", "2.0", requires=["tinycore==2.0"]),
            simple_index.wheel(folder, "tinyfs", "1.0", requires=["tinycore<2"]),
            simple_index.wheel(folder, "tinyray", "1.0"),
            simple_index.wheel(folder, "tinylib", "1.0", requires=["tinyray"])]
    return simple_index.simple_folder(tmp_path / "index", made).as_uri()


def _venv(tmp_path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    return tmp_path / "venv" / "bin" / "python"


def _installed(python: Path) -> dict[str, str]:
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    return {d.metadata["Name"]: d.version for d in metadata.distributions(path=[purelib])}


def _install_set(steps: tuple[dlc.InstallStep, ...], uninstall: tuple[str, ...]) -> dlc.InstallSet:
    real = frameworks.install_set(dlc.huggingface_versions()["4.56.2"])
    return dlc.InstallSet(image=real.image, torch=(), packages=(), no_deps=(), toolkits=(), constraints=(),
                          torch_constraints=(), uploaded_prior_to=None, torch_uploaded_prior_to=None, gaps={},
                          torch_index=None, steps=steps, uninstall=uninstall)


def test_successive_commands_install_what_one_resolution_refuses(tmp_path: Path) -> None:
    env = layers.pip_environment({"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"),
                                  "PIP_INDEX_URL": _wheels(tmp_path), "PIP_NO_CACHE_DIR": "1"})
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("")
    python = _venv(tmp_path)
    together = _install_set((dlc.InstallStep(("tinyboto", "tinylib", "tinyfs"), False, None),), ())
    assert not layers._install_steps(together, python, constraints, tmp_path / "one.log", env)
    assert "ResolutionImpossible" in (tmp_path / "one.log").read_text()

    steps = (dlc.InstallStep(("tinyboto", "tinylib"), False, None), dlc.InstallStep(("tinyfs",), False, None))
    assert layers._install_steps(_install_set(steps, ("tinyray",)), python, constraints, tmp_path / "steps.log", env)
    assert _installed(python) == {"tinyboto": "2.0", "tinylib": "1.0", "tinyfs": "1.0", "tinycore": "1.0"}
