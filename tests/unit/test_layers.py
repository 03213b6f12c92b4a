"""Framework layers (emulator/backends/layers.py) and manifests (emulator/backends/manifest.py), without pip.

Oracle: the wheel format (a ``.dist-info`` folder with ``METADATA`` and ``RECORD``, PEP 427/376) and
``importlib.metadata``, which reads those files; ``site.addsitedir``'s documented behaviour (a
``.pth`` file in the added folder runs).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.backends import layers, manifest
from emulator.job import dlc, frameworks


def _installed(site: Path, dist: str, files: dict[str, str]) -> None:
    """A distribution installed in ``site`` as pip leaves it (its ``RECORD`` lists its files)."""
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    for name, text in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    (info / "RECORD").write_text("".join(f"{n},,\n" for n in [*files, f"{info.name}/METADATA", f"{info.name}/RECORD"]))


def test_the_manifest_reads_import_names_from_the_installed_files(tmp_path: Path) -> None:
    """lightning-bolts installs pl_bolts, python-dotenv installs dotenv: names from RECORD, not guessed."""
    _installed(tmp_path, "lightning-bolts", {"pl_bolts/__init__.py": "", "pl_bolts/models.py": ""})
    _installed(tmp_path, "python-dotenv", {"dotenv/__init__.py": "", "dotenv/cli.py": ""})
    _installed(tmp_path, "six", {"six.py": ""})
    found = manifest.manifest([str(tmp_path)])
    assert found["distributions"] == {"lightning-bolts": "1.0", "python-dotenv": "1.0", "six": "1.0"}
    assert found["modules"] == ["dotenv", "pl_bolts", "six"]
    assert found["owners"]["pl_bolts"] == ["lightning-bolts"]
    written = layers.write_manifest(tmp_path)
    assert layers.Layer(tmp_path, "test").modules() == set(written["modules"])  # type: ignore[arg-type]


def test_the_manifest_script_runs_on_its_own(tmp_path: Path) -> None:
    """The image build runs manifest.py with the image's Python and nothing of the emulator."""
    _installed(tmp_path / "site", "lightning-bolts", {"pl_bolts/__init__.py": ""})
    done = subprocess.run([sys.executable, "-I", str(Path(manifest.__file__)), str(tmp_path / "site")],
                          capture_output=True, text=True, check=True)
    assert '"pl_bolts"' in done.stdout and '"lightning-bolts": "1.0"' in done.stdout


def test_a_layer_is_a_site_directory(tmp_path: Path) -> None:
    """The job environment's .pth adds each layer with site.addsitedir: the layer's own .pth runs,
    as in an image's site-packages."""
    layer = tmp_path / "layer"
    layer.mkdir()
    (layer / "extra.pth").write_text(str(tmp_path / "more") + "\n")
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "from_pth.py").write_text("X = 1\n")
    line = layers.addsitedir_line(layer)
    done = subprocess.run([sys.executable, "-I", "-c", line + "import from_pth; print(from_pth.X)"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "1"


def test_layers_pip_keeps_the_index_and_drops_find_links(monkeypatch: pytest.MonkeyPatch) -> None:
    """find-links and extra indexes (no upload times) would leak newer files past --uploaded-prior-to."""
    monkeypatch.setattr(layers, "_pip_config", lambda env: {"index-url": "https://mirror.example/simple",
                                                            "cert": "/etc/ca.pem"})
    env = layers.pip_environment({"PIP_FIND_LINKS": "/opt/wheels", "PIP_EXTRA_INDEX_URL": "file:///opt/pypi",
                                  "PIP_CONSTRAINT": "/etc/c.txt", "HOME": "/root", "PIP_TIMEOUT": "60"})
    assert "PIP_FIND_LINKS" not in env and "PIP_EXTRA_INDEX_URL" not in env and "PIP_CONSTRAINT" not in env
    assert env["PIP_INDEX_URL"] == "https://mirror.example/simple" and env["PIP_CERT"] == "/etc/ca.pem"
    assert env["PIP_TIMEOUT"] == "60" and env["HOME"] == "/root" and env["PIP_CONFIG_FILE"] == "/dev/null"


def test_a_family_shares_one_torch_layer() -> None:
    """The CPU, GPU and Hugging Face images of a family install the same torch builds: one base layer."""
    def base(image_id: str) -> Path:
        return layers.base_layer(frameworks.install_set(dlc.image(image_id))).path

    assert base("pytorch-2.5-cpu") == base("pytorch-2.5-gpu") == base("huggingface-4.49.0-pytorch-2.5-gpu")
    assert base("pytorch-2.13-cpu") == base("pytorch-2.13-gpu")
    assert base("pytorch-2.5-gpu") != base("pytorch-2.8-gpu")
    cpu = layers.image_layer(frameworks.install_set(dlc.image("pytorch-2.5-cpu"))).path
    gpu = layers.image_layer(frameworks.install_set(dlc.image("pytorch-2.5-gpu"))).path
    assert cpu != gpu  # their other packages differ (AWS's files: mpi4py, SMDDP, ...)


def test_a_layer_that_would_not_fit_is_refused_before_any_download(tmp_path: Path) -> None:
    """A cache folder on a 64 MB tmpfs (a mount namespace of its own; statvfs(2) is the oracle):
    making the default world's layers is refused with the numbers and the prune fix, and pip
    never ran (no log, no half-made layer)."""
    cache, log = tmp_path / "cache", tmp_path / "pip.log"
    cache.mkdir()
    code = ("import sys; from pathlib import Path; from emulator.backends import layers; from emulator.job import "
            "dlc, frameworks\ntry:\n    layers.ensure(frameworks.install_set(dlc.image(dlc.CURRENT_IMAGE)), "
            f"Path({str(log)!r}))\nexcept Exception as e:\n    print(type(e).__name__, e); sys.exit(3)")
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    done = subprocess.run(["unshare", *user, "--mount", "sh", "-c",
                           f'mount -t tmpfs -o size=64m tmpfs "{cache}" && exec "$0" -c "$1"', sys.executable, code],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "XDG_CACHE_HOME": str(cache),
                               "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    if "mount" in done.stderr and done.returncode != 3:
        pytest.skip(f"no tmpfs in a mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("BackendUnavailable") and "8.5 GB" in done.stdout and "GB are free" in done.stdout
    assert "cache prune" in done.stdout
    assert not log.exists() and not list(cache.rglob("*.part"))
