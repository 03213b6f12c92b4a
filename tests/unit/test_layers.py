"""Framework layers (emulator/backends/layers.py) and manifests (emulator/backends/manifest.py), without pip.

Oracle: the wheel format (a ``.dist-info`` folder with ``METADATA`` and ``RECORD``, PEP 427/376) and
``importlib.metadata``, which reads those files; ``site.addsitedir``'s documented behaviour (a
``.pth`` file in the added folder runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from emulator.backends import layers, manifest
from emulator.job import dlc, frameworks
from tests import simple_index


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


def test_ready_layers_are_returned_without_asking_pip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every job calls ``ensure``: with both layers made it returns them in ``sys.path`` order and runs
    no pip (``pip config list`` starts a Python: about 0.7 CPU-s per job); with one missing, it asks."""
    install = frameworks.install_set(dlc.image(dlc.CURRENT_IMAGE))
    monkeypatch.setattr(layers, "LAYERS", tmp_path)
    asked: list[str] = []

    def config(env: object) -> dict[str, str]:
        asked.append("pip config")
        raise RuntimeError("stop before any install")

    monkeypatch.setattr(layers, "_pip_config", config)
    base, top = layers.base_layer(install), layers.image_layer(install)
    base.path.mkdir()
    (base.path / ".ready").touch()
    with pytest.raises(RuntimeError, match="stop before any install"):
        layers.ensure(install, tmp_path / "pip.log")
    assert asked == ["pip config"]
    top.path.mkdir()
    (top.path / ".ready").touch()
    assert layers.ensure(install, tmp_path / "pip.log") == [top, base]
    assert asked == ["pip config"] and not (tmp_path / "pip.log").exists()


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
    done = _on_tmpfs(cache, "64m", code)
    if "mount" in done.stderr and done.returncode != 3:
        pytest.skip(f"no tmpfs in a mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("BackendUnavailable") and "8.5 GB" in done.stdout and "GB are free" in done.stdout
    assert "cache prune" in done.stdout
    assert not log.exists() and not list(cache.rglob("*.part"))


# -- where the torch builds come from (emulator/backends/layers.py torch_source, probe) -----------------
CPU_INDEX_VERSION = "2.13.0+cpu"  #: AWS's 2.13 CPU DLC's torch (emulator/job/dlc_images.json, from AWS's uv.lock)


def _of(image_id: str) -> Callable[[str | None], dlc.InstallSet]:
    def of(index: str | None) -> dlc.InstallSet:
        return frameworks.install_set(dlc.image(image_id), torch_index=index)
    return of


def _spy_probe(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every probe (the real one still runs) and forget earlier answers of this process."""
    calls: list[str] = []
    real = layers.probe

    def spy(index: str, torch: str | None = None, **kwargs: Any) -> bool:
        calls.append(index)
        return real(index, torch, **kwargs)

    monkeypatch.setattr(layers, "probe", spy)
    monkeypatch.setattr(layers, "_PROBED", {})
    return calls


def _ready(layer: layers.Layer) -> None:
    layer.path.mkdir(parents=True)
    (layer.path / ".ready").touch()


def test_a_family_shares_one_cpu_index_torch_layer_apart_from_pypis() -> None:
    """From the CPU index every image of a family gets the same +cpu builds (one layer), in a layer of
    its own: PyPI's CUDA builds are other files."""
    def base(image_id: str, index: str | None) -> Path:
        return layers.base_layer(frameworks.install_set(dlc.image(image_id), torch_index=index)).path

    url = "https://download.pytorch.org/whl/cpu"
    assert base("pytorch-2.5-cpu", url) == base("pytorch-2.5-gpu", url) \
        == base("huggingface-4.49.0-pytorch-2.5-gpu", url)
    assert base("pytorch-2.5-cpu", url) != base("pytorch-2.5-cpu", None)


def test_an_existing_torch_layer_is_used_without_a_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer made from PyPI keeps being found, with the CPU index reachable and no network used;
    where both exist the CPU index's is preferred."""
    monkeypatch.setattr(layers, "LAYERS", tmp_path)
    calls = _spy_probe(monkeypatch)
    root = tmp_path / "index"
    simple = simple_index.simple_folder(root, [simple_index.wheel(tmp_path / "w", "torch", CPU_INDEX_VERSION)])
    with simple_index.serve(simple.parent) as (url, requested):
        env = {dlc.TORCH_INDEX_VAR: f"{url}/simple"}
        _ready(layers.base_layer(_of("pytorch-2.13-gpu")(None)))
        assert layers.torch_source(_of("pytorch-2.13-gpu"), env).torch_index is None
        _ready(layers.base_layer(_of("pytorch-2.13-gpu")(f"{url}/simple")))
        assert layers.torch_source(_of("pytorch-2.13-cpu"), env).torch_index == f"{url}/simple"
        assert calls == [] and requested == []


def test_without_a_torch_layer_the_cpu_index_is_probed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No layer yet: one GET of <index>/torch/ (PEP 503's project page) decides, for every image of the family."""
    monkeypatch.setattr(layers, "LAYERS", tmp_path / "layers")
    calls = _spy_probe(monkeypatch)
    simple = simple_index.simple_folder(tmp_path / "index", [simple_index.wheel(tmp_path / "w", "torch",
                                                                                CPU_INDEX_VERSION)])
    with simple_index.serve(simple.parent) as (url, requested):
        env = {dlc.TORCH_INDEX_VAR: f"{url}/simple"}
        for image_id in ("pytorch-2.13-cpu", "pytorch-2.13-gpu"):
            chosen = layers.torch_source(_of(image_id), env)
            assert chosen.torch_index == f"{url}/simple" and "torch==2.13.0+cpu" in chosen.torch
        assert requested == ["/simple/torch/"] and len(calls) == 1


def test_the_probe_answers_for_the_build_it_needs(tmp_path: Path) -> None:
    """Reachable and listing torch 2.13.0+cpu (percent-encoded, as pip and download.pytorch.org write it):
    yes; another version, a missing project page (404), nothing listening: no."""
    simple = simple_index.simple_folder(tmp_path / "index", [simple_index.wheel(tmp_path / "w", "torch",
                                                                                CPU_INDEX_VERSION)])
    with simple_index.serve(simple.parent) as (url, _):
        assert layers.probe(f"{url}/simple", CPU_INDEX_VERSION) and layers.probe(f"{url}/simple/")
        assert not layers.probe(f"{url}/simple", "2.12.1+cpu")
        assert not layers.probe(f"{url}/nowhere", CPU_INDEX_VERSION)
    assert not layers.probe(f"http://127.0.0.1:{simple_index.closed_port()}/simple", CPU_INDEX_VERSION)


def test_an_index_that_never_answers_is_given_up_after_the_timeout(tmp_path: Path) -> None:
    """A listener that accepts and stays silent: the probe returns False once its timeout has passed."""
    with simple_index.silent_port() as port:
        start = time.monotonic()
        assert not layers.probe(f"http://127.0.0.1:{port}/simple", CPU_INDEX_VERSION, timeout=0.5)
        took = time.monotonic() - start
    assert took >= 0.5, took  # it waited for the timeout (no upper bound: timings belong in bench)


def test_an_unreachable_index_falls_back_to_pypi_and_pypi_means_no_probe(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A closed loopback port: PyPI's builds (the same install set as before the CPU index existed).
    ``pypi``: PyPI's builds and no probe at all."""
    monkeypatch.setattr(layers, "LAYERS", tmp_path)
    calls = _spy_probe(monkeypatch)
    closed = f"http://127.0.0.1:{simple_index.closed_port()}/simple"
    assert layers.torch_source(_of("pytorch-2.5-gpu"), {dlc.TORCH_INDEX_VAR: closed}) == _of("pytorch-2.5-gpu")(None)
    assert calls == [closed]
    for value in ("pypi", "PYPI"):
        assert layers.torch_source(_of("pytorch-2.8-gpu"), {dlc.TORCH_INDEX_VAR: value}).torch_index is None
    assert calls == [closed]


def test_job_json_says_which_torch_build_the_layer_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The base layer's own record (its manifest) goes to Emulator.Framework.TorchBuild; the deviation
    names AWS's builds: +cu124 on the 2.5 GPU image, +cpu on its CPU image (AWS's build files)."""
    monkeypatch.setattr(layers, "LAYERS", tmp_path)
    url = "https://download.pytorch.org/whl/cpu"
    cpu_set, pypi_set = _of("pytorch-2.5-gpu")(url), _of("pytorch-2.5-gpu")(None)
    assert layers.torch_build(cpu_set) is None  # not made yet
    for install, version, index in ((cpu_set, "2.5.1+cpu", url), (pypi_set, "2.5.1", None)):
        _ready(layers.base_layer(install))
        (layers.base_layer(install).path / layers.MANIFEST).write_text(json.dumps(
            {"distributions": {"torch": version, "numpy": "1.26.4"}, "torch_index": index}))
    sel = frameworks.select("2.5.1")
    gpu, cpu = dlc.image("pytorch-2.5-gpu"), dlc.image("pytorch-2.5-cpu")

    def torch_lines(image: dlc.Image, install: dlc.InstallSet) -> tuple[object, list[str]]:
        fields = frameworks.record(sel, torch=None, python="3.11.7", toolkit=None, python_from="this machine's",
                                   image=image, torch_build=layers.torch_build(install))
        return fields["TorchBuild"], [d for d in fields["Deviations"] if d.startswith("torch ")]  # type: ignore[attr-defined]

    build, lines = torch_lines(gpu, pypi_set)
    assert build == {"Source": "PyPI", "Builds": {"torch": "2.5.1"}}
    assert len(lines) == 1 and "PyPI's builds" in lines[0] and "+cu124" in lines[0]
    build, lines = torch_lines(gpu, cpu_set)
    assert build == {"Source": url, "Builds": {"torch": "2.5.1+cpu"}}
    assert len(lines) == 1 and f"+cpu builds from {url}" in lines[0] and "+cu124" in lines[0]
    assert torch_lines(cpu, cpu_set)[1] == []  # the CPU DLC's own build: nothing differs


def test_the_disk_check_counts_the_torch_build_that_will_be_used(tmp_path: Path) -> None:
    """A 5 GB cache disk (a tmpfs in a mount namespace; statvfs(2) is the oracle): a family's layers
    with PyPI's CUDA torch (4.6 to 5.5 GB measured for the torch layer alone, docs/guides/frameworks.md) are refused
    before any download, with the prune fix; with the +cpu builds (torch 2.13.0+cpu: 0.76 GB installed)
    they are not refused, nor is a set without torch builds (its base layer is empty). ``ensure`` is
    not called: nothing may download here."""
    cache = tmp_path / "cache"
    cache.mkdir()
    code = ("from emulator.backends import layers; from emulator.job import dlc, frameworks\n"
            "for index in (None, 'https://download.pytorch.org/whl/cpu'):\n"
            "    install = frameworks.install_set(dlc.image('pytorch-2.5-gpu'), torch_index=index)\n"
            "    try:\n"
            "        layers._require_disk([(layers.base_layer(install), layers.base_kind(install)),\n"
            "                              (layers.image_layer(install), 'image')])\n"
            "        print(index, 'fits')\n"
            "    except Exception as e:\n"
            "        print(index, type(e).__name__, e)\n"
            "import dataclasses\n"
            "bare = dataclasses.replace(install, torch=(), torch_index=None)\n"
            "layers._require_disk([(layers.base_layer(bare), layers.base_kind(bare)),\n"
            "                      (layers.image_layer(bare), 'image')])\n"
            "print('no torch builds fits')\n")
    done = _on_tmpfs(cache, "5g", code)
    if "mount" in done.stderr and done.returncode != 0:
        pytest.skip(f"no tmpfs in a mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stdout + done.stderr
    pypi, cpu, bare = done.stdout.strip().splitlines()
    assert pypi.startswith("None BackendUnavailable") and "GB are free" in pypi and "cache prune" in pypi
    assert "5.4 GB are free" in pypi  # tmpfs's size=5g is 5 GiB: 5.37 GB
    assert cpu == "https://download.pytorch.org/whl/cpu fits"
    # a set without torch builds (a test's stand-in image) makes an empty base layer: not counted
    assert bare == "no torch builds fits"


def _on_tmpfs(cache: Path, size: str, code: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a mount namespace where ``cache`` (XDG_CACHE_HOME) is a tmpfs of ``size``."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return subprocess.run(["unshare", *user, "--mount", "sh", "-c",
                           f'mount -t tmpfs -o size={size} tmpfs "{cache}" && exec "$0" -c "$1"', sys.executable,
                           code], capture_output=True, text=True, timeout=120, check=False,
                          env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "XDG_CACHE_HOME": str(cache),
                               "PYTHONPATH": str(Path(__file__).resolve().parents[2])})


def test_a_jobs_install_set_is_chosen_once_its_torch_layer_is_made(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The process backend asks ``jobenv.install_of`` eight times per job; once the chosen torch layer
    is made, later calls in this process give that choice without looking at the layers again. Before
    that (nothing made: the probe decides), every call chooses afresh."""
    from emulator.backends import jobenv
    from emulator.job import request as rq

    monkeypatch.setattr(layers, "LAYERS", tmp_path / "layers")
    monkeypatch.setattr(jobenv, "_MADE", {})
    monkeypatch.setenv(dlc.TORCH_INDEX_VAR, "pypi")  # PyPI's builds: no probe
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("")
    request = rq.create(entry_point="train.py", source_dir=src, instance_count=1, instance_type="ml.g5.xlarge",
                        output_path=tmp_path / "out", job_name="once", framework_version="2.13")
    chosen: list[str | None] = []
    real = layers.torch_source

    def counted(of: Any, *args: Any, **kwargs: Any) -> dlc.InstallSet:
        install = real(of, *args, **kwargs)
        chosen.append(install.torch_index)
        return install

    monkeypatch.setattr(layers, "torch_source", counted)
    first = jobenv.install_of(request)
    assert jobenv.install_of(request) == first and chosen == [None, None]  # not made yet: chosen each time
    _ready(layers.base_layer(first))
    for _ in range(3):
        assert jobenv.install_of(request) == first
    assert chosen == [None, None, None]  # chosen once more (and kept: the layer is made), then not again
    monkeypatch.setattr(layers, "LAYERS", tmp_path / "other")  # another layers folder: its own choice
    jobenv.install_of(request)
    assert len(chosen) == 4
