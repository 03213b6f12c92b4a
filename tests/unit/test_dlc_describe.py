"""tools/dlc_describe: its parsing rules on small snippets, the committed emulator/job/dlc_images.json
against the facts in /work/shared/reference/dlc-contents.md, and (when AWS's repository is mirrored here)
that the committed file is exactly what the generator writes."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tools.dlc_describe import (
    buildspec,
    dockerfile,
    generate,
    gitrepo,
    huggingface,
    installs,
    markers,
    pytorch,
    requirements,
    uvlock,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "emulator" / "job" / "dlc_images.json"
MIRROR = Path("/work/.mirror/aws+deep-learning-containers/repo")


def packages_of(text: str, target: str = "sagemaker", build_args: dict[str, str] | None = None
                ) -> tuple[dict[str, Any], list[str]]:
    df = dockerfile.parse_dockerfile(text, build_args or {})
    packages, uninstalled = installs.apply_events(dockerfile.dockerfile_events(df, target, build_args or {}))
    return packages, sorted(uninstalled)


# ---------------------------------------------------------------------------------------------
# (a) parsing rules
# ---------------------------------------------------------------------------------------------


def test_continuations_drop_comment_and_blank_lines_and_keep_line_numbers() -> None:
    text = (
        "FROM x AS sagemaker\n"  # 1
        "RUN pip install --no-cache-dir -U \\\n"  # 2
        "    torchtnt \\\n"  # 3
        "    # fastai \\\n"  # 4  comment inside the continuation: removed, backslash and all
        "\n"  # 5  blank line inside the continuation: skipped
        "    accelerate \\ \n"  # 6  blanks after the backslash still continue the line
        "    spacy\n"  # 7
        "RUN pip install late\n"  # 8
    )
    ins = dockerfile.parse_instructions(text)
    assert [i.keyword for i in ins] == ["FROM", "RUN", "RUN"]
    assert "fastai" not in ins[1].args
    packages, _ = packages_of(text)
    assert sorted(packages) == ["accelerate", "late", "spacy", "torchtnt"]
    assert packages["torchtnt"].lines == [3]
    assert packages["accelerate"].lines == [6]
    assert packages["spacy"].lines == [7]
    assert packages["late"].lines == [8]


def test_a_comment_line_ends_nothing_but_a_shell_comment_ends_the_joined_line() -> None:
    # "# x" at a word start inside the *joined* RUN is a shell comment: everything after it is ignored
    text = "FROM x AS sagemaker\nRUN pip install a # not-a-package \\\n    b\n"
    packages, _ = packages_of(text)
    assert sorted(packages) == ["a"]


def test_arg_scoping_global_redeclared_inherited_and_build_args() -> None:
    text = (
        "ARG TORCH_URL=https://h/pytorch/v2.5.1/torch-2.5.1%2Bcu124-cp311-cp311-linux_x86_64.whl\n"
        "ARG FLASH_ATTN_VERSION=2.6.3\n"
        "ARG UNUSED_HERE=9\n"
        "FROM nvidia/cuda:12.4.1-base-ubuntu22.04 AS base_image\n"
        "FROM base_image AS common\n"
        "ARG FLASH_ATTN_VERSION\n"  # re-declared: takes the global default
        "ENV PEFT_VERSION=0.14.0\n"
        "FROM common AS ec2\n"
        "RUN pip install ec2-only\n"
        "FROM common AS sagemaker\n"
        "ARG TORCH_URL\n"
        "RUN pip install ${TORCH_URL} flash-attn==${FLASH_ATTN_VERSION} peft==$PEFT_VERSION\n"
        "RUN pip install other==${UNUSED_HERE}\n"  # a global ARG not re-declared is empty -> unresolved
    )
    packages, _ = packages_of(text)
    assert packages["torch"].requirement == "torch==2.5.1+cu124"
    assert packages["torch"].version == "2.5.1+cu124"
    assert packages["flash-attn"].requirement == "flash-attn==2.6.3"  # ARG inherited from common
    assert packages["peft"].version == "0.14.0"  # ENV inherited from common
    assert "ec2-only" not in packages  # the ec2 stage is not part of the SageMaker image
    assert "other" not in packages
    events = dockerfile.dockerfile_events(dockerfile.parse_dockerfile(text), "sagemaker")
    notes = [e.text for e in events if e.kind == "note"]
    assert any("UNUSED_HERE" in n for n in notes)
    # a build argument overrides the default
    packages, _ = packages_of(text, build_args={"FLASH_ATTN_VERSION": "2.7.3"})
    assert packages["flash-attn"].version == "2.7.3"
    df = dockerfile.parse_dockerfile(text)
    assert dockerfile.root_image(df, df.stages[-1]) == "nvidia/cuda:12.4.1-base-ubuntu22.04"


def test_conda_then_pip_keeps_one_entry_with_every_line() -> None:
    text = (
        "FROM x AS sagemaker\n"
        "RUN /opt/conda/bin/mamba install -y -c conda-forge \\\n"  # 2
        "    python=$PYTHON_VERSION \\\n"  # 3 skipped: interpreter
        "    mkl-include \\\n"  # 4 skipped
        "    typing \\\n"  # 5 skipped
        '    "numpy<2" \\\n'  # 6
        "    pyyaml \\\n"  # 7
        " && /opt/conda/bin/mamba install -y -c dglteam dgl-cuda11.7=0.9.1 \\\n"  # 8
        " && /opt/conda/bin/conda install -y pytorch=2.0.1 torchvision cpuonly -c https://aws-ml-conda\n"  # 9
        'RUN pip install "numpy==1.26.4" PyYAML\n'  # 10
    )
    packages, _ = packages_of(text)
    assert "python" not in packages and "mkl-include" not in packages and "typing" not in packages
    assert "cpuonly" not in packages
    numpy = packages["numpy"]
    assert (numpy.requirement, numpy.version, numpy.via, numpy.lines) == ("numpy==1.26.4", "1.26.4", "pip", [6, 10])
    assert packages["pyyaml"].lines == [7, 10]
    assert packages["dgl"].requirement == "dgl==0.9.1"  # dgl-cuda11.7 is the dgl distribution
    assert packages["torch"].requirement == "torch==2.0.1"  # conda's pytorch is PyPI's torch
    assert packages["torch"].via == "conda"
    assert packages["torchvision"].version is None


@pytest.mark.parametrize(
    ("spec", "requirement", "version"),
    [
        ("accelerate=0.22.0", "accelerate==0.22.0", "0.22.0"),
        ("numpy=1.26", "numpy==1.26.*", None),
        ('"cloudpickle==2.2.1"', "cloudpickle==2.2.1", "2.2.1"),
        ("awscli<2", "awscli<2", None),
        ("conda-forge::Pillow>=9.4,<9.5.0", "pillow>=9.4,<9.5.0", None),
        ("python=3.11.10", None, None),
        ("pytorch-cuda=12.1", None, None),
        ("cuda-nvcc=12.1.*", None, None),
        ("magma-cuda117", None, None),
        ("mkl<2024.1.0", None, None),
    ],
)
def test_conda_specs(spec: str, requirement: str | None, version: str | None) -> None:
    parsed = requirements.parse_conda_spec(spec.strip('"'))
    assert parsed is not None
    if requirement is None:
        assert parsed.requirement is None and parsed.skipped
    else:
        assert parsed.requirement is not None
        assert (parsed.requirement.requirement, parsed.requirement.version) == (requirement, version)


def test_uninstall_then_reinstall() -> None:
    text = (
        "FROM x AS sagemaker\n"
        "RUN pip install torch==1.0 dataclasses\n"  # 2
        "RUN pip uninstall -y torch torchvision dataclasses \\\n"  # 3
        " && pip install --no-cache-dir -U torch==2.0\n"  # 4
        "RUN pip uninstall transformer-engine || true\n"  # 5
    )
    packages, uninstalled = packages_of(text)
    assert packages["torch"].requirement == "torch==2.0"
    assert packages["torch"].lines == [4]  # lines since the last uninstall
    assert "dataclasses" not in packages
    assert uninstalled == ["dataclasses", "torchvision", "transformer-engine"]


@pytest.mark.parametrize(
    ("argument", "name", "requirement", "version"),
    [
        ("https://framework-binaries.s3.us-west-2.amazonaws.com/pytorch/v2.5.1/x86/cu124/"
         "torch-2.5.1%2Bcu124-cp311-cp311-linux_x86_64.whl", "torch", "torch==2.5.1+cu124", "2.5.1+cu124"),
        ("https://smdataparallel.s3.amazonaws.com/binary/pytorch/2.1.0/cu121/2024-02-04/"
         "smdistributed_dataparallel-2.1.0-cp310-cp310-linux_x86_64.whl", "smdistributed-dataparallel",
         "smdistributed-dataparallel==2.1.0", "2.1.0"),
        ("https://x/deepspeed-0.6.1%2Bb3d766e-py3-none-any.whl", "deepspeed", "deepspeed==0.6.1+b3d766e",
         "0.6.1+b3d766e"),
        ("git+https://github.com/NVIDIA/TransformerEngine.git@release_v1.11", "transformer-engine",
         "transformer-engine @ git+https://github.com/NVIDIA/TransformerEngine.git@release_v1.11", None),
        ("huggingface_hub[hf_transfer]==0.29.1", "huggingface-hub", "huggingface-hub[hf_transfer]==0.29.1", "0.29.1"),
        ("transformers[sklearn,sentencepiece,audio,vision,pipelines]==4.49.0", "transformers",
         "transformers[sklearn,sentencepiece,audio,vision,pipelines]==4.49.0", "4.49.0"),
        ("sagemaker-experiments==0.*", "sagemaker-experiments", "sagemaker-experiments==0.*", None),
        ("Pillow>=9.0.0", "pillow", "pillow>=9.0.0", None),
    ],
)
def test_pip_arguments(argument: str, name: str, requirement: str, version: str | None) -> None:
    req = installs.classify_pip_argument(argument, installs.RunContext({}))
    assert req is not None
    assert (req.name, req.requirement, req.version) == (name, requirement, version)


def test_shell_quoting_redirections_prefix_env_and_global_options() -> None:
    text = (
        "FROM x AS sagemaker\n"
        "ARG FLASH_ATTN_VERSION=2.7.3\n"
        # unquoted: the shell sends pip's output to a file named '=3.1.6'; pip gets 'jinja2'
        'RUN pip install --no-cache-dir jinja2>=3.1.6 "tornado>=6.5.1" cmake">=3.24.3,<3.25" 2>/dev/null\n'
        "RUN MAX_JOBS=4 pip install --no-cache-dir flash-attn==${FLASH_ATTN_VERSION} --no-build-isolation\n"
        "RUN pip --no-cache-dir install --upgrade wheel --trusted-host pypi.org \\\n"
        " && python -m pip install 'evaluate==0.4.3' --no-deps \\\n"
        " && SMDATAPARALLEL_PT=1 /opt/conda/bin/pip install -i https://idx/simple six\n"
    )
    packages, _ = packages_of(text)
    assert packages["jinja2"].requirement == "jinja2"
    assert packages["tornado"].requirement == "tornado>=6.5.1"
    assert packages["cmake"].requirement == "cmake>=3.24.3,<3.25"
    assert packages["flash-attn"].version == "2.7.3"
    assert packages["evaluate"].version == "0.4.3"
    assert sorted(packages) == ["cmake", "evaluate", "flash-attn", "jinja2", "six", "tornado", "wheel"]


def test_source_trees_cloned_then_installed() -> None:
    text = (
        "FROM x AS sagemaker\n"
        "ARG SMDEBUG_VERSION=1.0.34\n"
        "RUN pip install packaging \\\n"
        "  && git clone https://github.com/NVIDIA/apex \\\n"
        "  && cd apex \\\n"
        "  && git checkout 23.08 -b apex \\\n"
        "  && pip install -v --no-build-isolation --config-settings \"--build-option=--cpp_ext\" ./ \\\n"
        "  && cd .. && rm -rf apex\n"
        "RUN cd /tmp \\\n"
        "  && git clone https://github.com/awslabs/sagemaker-debugger --branch ${SMDEBUG_VERSION} --depth 1 \\\n"
        "  && cd sagemaker-debugger \\\n"
        "  && python setup.py install\n"
    )
    packages, _ = packages_of(text)
    assert packages["apex"].requirement == "apex @ git+https://github.com/NVIDIA/apex@23.08"
    assert packages["smdebug"].requirement == "smdebug @ git+https://github.com/awslabs/sagemaker-debugger@1.0.34"


def test_builder_stages_if_else_and_wheel_glob() -> None:
    # the shape of docker/pytorch/Dockerfile.cuda: installs in builder stages copied into the target
    text = (
        "ARG TRANSFORMER_ENGINE_VERSION=2.13.0\n"
        "ARG FLASH_ATTN_VERSION=2.8.3\n"
        "FROM nvidia/cuda:13.0.2-devel-amzn2023 AS builder-base\n"
        "ARG TRANSFORMER_ENGINE_VERSION\n"
        "COPY docker/pytorch/2.12/cuda/pyproject.toml docker/pytorch/2.12/cuda/uv.lock /tmp/build/\n"
        "RUN --mount=type=cache,target=/root/.cache/uv uv sync --frozen --no-dev --no-install-project\n"
        "RUN TE_WHL=$(find /tmp/wheels -name 'te*.whl' | head -1) && \\\n"
        "  if [ -n \"${TE_WHL}\" ]; then \\\n"
        "    pip install \"${TE_WHL}\" && \\\n"
        "    pip install --no-build-isolation \"transformer-engine[pytorch]==${TRANSFORMER_ENGINE_VERSION}\"; \\\n"
        "  else \\\n"
        "    pip install --no-build-isolation \"transformer-engine[pytorch]==${TRANSFORMER_ENGINE_VERSION}\"; \\\n"
        "  fi\n"
        "FROM builder-base AS builder-flash-attn\n"
        "ARG FLASH_ATTN_VERSION\n"
        "RUN pip wheel --no-deps --wheel-dir /tmp/built_wheels flash-attn==${FLASH_ATTN_VERSION} && \\\n"
        "    uv pip install /tmp/built_wheels/flash_attn*.whl\n"
        "FROM nvidia/cuda:13.0.2-runtime-amzn2023 AS runtime-base\n"
        "COPY --from=builder-base /opt/venv /opt/venv\n"
        "COPY --from=builder-flash-attn /opt/venv/lib /opt/venv/lib\n"
        "FROM runtime-base AS runtime\n"
        "RUN pip install runtime-only\n"
        "FROM runtime-base AS sagemaker\n"
        "COPY docker/pytorch/2.12/cuda/pyproject.toml docker/pytorch/2.12/cuda/uv.lock /tmp/build/\n"
        "RUN cd /tmp/build && uv sync --frozen --no-dev --extra sagemaker --no-install-project --inexact\n"
    )
    df = dockerfile.parse_dockerfile(text, {"TRANSFORMER_ENGINE_VERSION": "2.17.0"})
    events = dockerfile.dockerfile_events(df, "sagemaker", {"TRANSFORMER_ENGINE_VERSION": "2.17.0"})
    packages, _ = installs.apply_events(events)
    assert sorted(packages) == ["flash-attn", "transformer-engine"]
    assert packages["transformer-engine"].requirement == "transformer-engine[pytorch]==2.17.0"
    assert packages["transformer-engine"].lines == [10, 12]
    assert packages["flash-attn"].requirement == "flash-attn==2.8.3"
    assert packages["flash-attn"].lines == [16, 17]
    syncs = [e for e in events if e.kind == "uv-sync"]
    assert [(s.names, s.text) for s in syncs] == [([], "docker/pytorch/2.12/cuda/pyproject.toml"),
                                                  (["sagemaker"], "docker/pytorch/2.12/cuda/pyproject.toml")]
    assert any("TE_WHL" in e.text for e in events if e.kind == "note")


def test_buildspec_anchors_join_and_commented_blocks() -> None:
    text = (
        "framework: &FRAMEWORK pytorch\n"
        "version: &VERSION 2.0.1\n"
        'short_version: &SHORT_VERSION "2.0"\n'
        "arch_type: x86\n"
        "images:\n"
        "  BuildSageMakerGPUPTTrainPy3DockerImage:\n"
        "    <<: *TRAINING_REPOSITORY\n"
        "    device_type: &DEVICE_TYPE gpu\n"
        "    python_version: &DOCKER_PYTHON_VERSION py3\n"
        "    cuda_version: &CUDA_VERSION cu118\n"
        "    docker_file: !join [ docker/, *SHORT_VERSION, /, *DOCKER_PYTHON_VERSION, /, *CUDA_VERSION, /Dockerfile.,\n"
        "                         *DEVICE_TYPE ]\n"
        "    target: sagemaker\n"
        "  # BuildSageMakerCPUPTTrainPy3DockerImage:\n"
        "  #   device_type: &DEVICE_TYPE cpu\n"
        "  #   target: sagemaker\n"
        "  BuildSageMakerGPUPTTrainPy3cu121DockerImage:\n"
        "    device_type: &DEVICE_TYPE gpu\n"
        "    cuda_version: &CUDA_VERSION cu121\n"
        "    latest_release_tag: !join [ *VERSION, \"-\", *DEVICE_TYPE ]\n"
        "    docker_file: !join [ docker/, *SHORT_VERSION, /, *DOCKER_PYTHON_VERSION, /, *CUDA_VERSION, /Dockerfile.,\n"
        "                         *DEVICE_TYPE ]\n"
        "    target: sagemaker\n"
    )
    bs = buildspec.parse_buildspec(text)
    assert (bs.version, bs.short_version, bs.arch_type) == ("2.0.1", "2.0", "x86")
    assert [(i.device, i.cuda, i.docker_file, i.latest_release) for i in bs.images] == [
        ("gpu", "cu118", "docker/2.0/py3/cu118/Dockerfile.gpu", False),
        ("gpu", "cu121", "docker/2.0/py3/cu121/Dockerfile.gpu", True),
    ]
    picked = pytorch.pick_image([(img, bs, "b.yml") for img in bs.images])
    assert picked[0].cuda == "cu121"  # latest_release_tag wins


LOCK = """
version = 1
requires-python = "==3.12.*"

[[package]]
name = "pytorch-dlc-cpu"
version = "2.13.0"
source = { virtual = "." }
dependencies = [
    { name = "torch", version = "2.13.0", source = { registry = "https://download.pytorch.org/whl/cpu" }, marker = "platform_machine != 's390x' and platform_machine != 'x86_64' and sys_platform == 'darwin'" },
    { name = "torch", version = "2.13.0+cpu", source = { registry = "https://download.pytorch.org/whl/cpu" }, marker = "platform_machine == 's390x' or platform_machine == 'x86_64' or sys_platform != 'darwin'" },
    { name = "fastai" },
]

[package.optional-dependencies]
sagemaker = [
    { name = "shap", version = "0.50.0", source = { registry = "https://pypi.org/simple" }, marker = "platform_machine == 'x86_64' and sys_platform == 'darwin'" },
    { name = "shap", version = "0.51.0", source = { registry = "https://pypi.org/simple" }, marker = "platform_machine != 'x86_64' or sys_platform != 'darwin'" },
    { name = "sagemaker" },
]
other = [{ name = "not-synced" }]

[[package]]
name = "torch"
version = "2.13.0"
source = { registry = "https://download.pytorch.org/whl/cpu" }

[[package]]
name = "torch"
version = "2.13.0+cpu"
source = { registry = "https://download.pytorch.org/whl/cpu" }

[[package]]
name = "fastai"
version = "2.8.7"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "shap"
version = "0.50.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "shap"
version = "0.51.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "sagemaker"
version = "3.8.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "not-synced"
version = "1.0"
source = { registry = "https://pypi.org/simple" }
"""  # noqa: E501  (uv.lock lines as uv writes them)


def test_uv_lock_takes_the_linux_x86_64_entry_of_the_project() -> None:
    packages, notes = uvlock.locked_packages(LOCK, "pytorch-dlc-cpu", ["sagemaker"], "3.12")
    got = {p.name: (p.requirement, p.version, p.via, p.lines) for p in packages}
    assert got == {
        "fastai": ("fastai==2.8.7", "2.8.7", "uv", []),
        "sagemaker": ("sagemaker==3.8.0", "3.8.0", "uv", []),
        "shap": ("shap==0.51.0", "0.51.0", "uv", []),
        "torch": ("torch==2.13.0+cpu", "2.13.0+cpu", "uv", []),
    }
    assert notes == []
    without_extra, _ = uvlock.locked_packages(LOCK, "pytorch-dlc-cpu", [], "3.12")
    assert sorted(p.name for p in without_extra) == ["fastai", "torch"]


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        ("platform_machine == 'x86_64' and sys_platform == 'darwin'", False),
        ("(platform_machine != 's390x' and sys_platform != 'darwin') or sys_platform == 'win32'", True),
        ("python_version >= '3.10' and python_full_version < '3.13'", True),
        ("python_version < '3.9'", False),
        ("'linux' in sys_platform", True),
        ("sys_platform not in 'win32 cygwin' and os_name == 'posix'", True),
        ("'x86' not in platform_machine", False),
        ("python_full_version == '3.12'", True),  # versions are zero padded: 3.12.0 == 3.12
        ("python_version == '3.12.*' and python_version != '3.1.*'", True),
        ("python_full_version < '3.13.0a1' and python_full_version > '3.12.0rc2'", True),
        ("python_full_version ~= '3.11'", True),
        ("python_full_version ~= '3.12.1'", False),
        ("'3.13' <= python_version", False),
        ("sys_platform == 'linux' and (platform_machine == 'aarch64' or platform_machine == 'x86_64')", True),
        ("((sys_platform == 'darwin' or platform_system == 'Linux')) and implementation_name == 'cpython'", True),
        ("os_name == 'nt' or platform_system == 'Linux' and platform_python_implementation == 'PyPy'", False),
        ("extra == 'sagemaker'", False),  # outside an extra
        ("", True),
    ],
)
def test_markers(marker: str, expected: bool) -> None:
    assert markers.evaluate_marker(marker, markers.marker_environment("3.12")) is expected


def test_markers_extra_python_and_errors() -> None:
    env = markers.marker_environment("3.13.1")
    assert (env["python_version"], env["python_full_version"]) == ("3.13", "3.13.1")
    with_extra = {**env, "extra": "sagemaker"}
    assert markers.evaluate_marker("extra == 'SageMaker' and python_full_version >= '3.13.1'", with_extra)
    assert not markers.evaluate_marker("extra == 'sagemaker'", {**env, "extra": "other"})
    assert markers.compare_versions("1.0.dev1", "<", "1.0a1") and markers.compare_versions("1.0.post1", ">", "1.0")
    assert markers.compare_versions("3.12", "<", "linux") is None  # not versions: compared as strings instead
    for bad in ("python_version >", "(sys_platform == 'linux'", "sys_platform = 'linux'", "os_name == 'posix' xor"):
        with pytest.raises(ValueError):
            markers.evaluate_marker(bad, env)


CLOSURE_LOCK = """
version = 1
requires-python = "==3.12.*"

[[package]]
name = "proj"
version = "1.0"
source = { virtual = "." }
dependencies = [
    { name = "torch", version = "2.13.0", source = { registry = "https://download.pytorch.org/whl/cpu" }, marker = "sys_platform == 'darwin'" },
    { name = "torch", version = "2.13.0+cpu", source = { registry = "https://download.pytorch.org/whl/cpu" }, marker = "sys_platform != 'darwin'" },
    { name = "requests", extra = ["socks"] },
    { name = "colorama", marker = "sys_platform == 'win32'" },
]

[package.optional-dependencies]
sagemaker = [{ name = "pandas" }]
other = [{ name = "not-synced" }]

[package.metadata]
requires-dist = [{ name = "not-synced", marker = "extra == 'sagemaker'" }]

[[package]]
name = "torch"
version = "2.13.0"
source = { registry = "https://download.pytorch.org/whl/cpu" }
resolution-markers = ["sys_platform == 'darwin'"]
dependencies = [{ name = "darwin-only" }]

[[package]]
name = "torch"
version = "2.13.0+cpu"
source = { registry = "https://download.pytorch.org/whl/cpu" }
resolution-markers = ["sys_platform != 'darwin'"]
dependencies = [
    { name = "filelock" },
    { name = "sympy", marker = "python_full_version >= '3.13'" },
]

[[package]]
name = "requests"
version = "2.32.5"
source = { registry = "https://pypi.org/simple" }
dependencies = [{ name = "urllib3" }]

[package.optional-dependencies]
socks = [{ name = "pysocks" }]

[[package]]
name = "urllib3"
version = "2.7.0"
source = { registry = "https://pypi.org/simple" }
dependencies = [{ name = "requests" }]

[[package]]
name = "pandas"
version = "2.3.3"
source = { registry = "https://pypi.org/simple" }
dependencies = [
    { name = "numpy" },
    { name = "tzdata", marker = "python_version >= '3.12'" },
]

[[package]]
name = "numpy"
version = "2.3.0"
source = { registry = "https://pypi.org/simple" }
resolution-markers = ["sys_platform == 'darwin'"]

[[package]]
name = "numpy"
version = "2.4.4"
source = { registry = "https://pypi.org/simple" }
resolution-markers = ["sys_platform != 'darwin'"]

[[package]]
name = "darwin-only"
version = "1.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "filelock"
version = "3.20.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "sympy"
version = "1.14.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "PySocks"
version = "1.7.1"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "tzdata"
version = "2025.2"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "colorama"
version = "0.4.6"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "not-synced"
version = "1.0"
source = { registry = "https://pypi.org/simple" }
"""  # noqa: E501  (uv.lock lines as uv writes them)


def test_lock_closure_follows_markers_extras_and_the_linux_entry_of_a_name() -> None:
    locked, notes = uvlock.lock_closure(CLOSURE_LOCK, "proj", ["sagemaker"], "3.12")
    assert locked == {
        "filelock": "3.20.0",  # torch 2.13.0+cpu's, not the macOS torch's darwin-only
        "numpy": "2.4.4",  # named without a version: the entry whose resolution-markers hold
        "pandas": "2.3.3",  # the synced extra
        "pysocks": "1.7.1",  # requests[socks]
        "requests": "2.32.5",
        "torch": "2.13.0+cpu",
        "tzdata": "2025.2",
        "urllib3": "2.7.0",  # requests <-> urllib3: a cycle is followed once
    }
    assert notes == []
    assert list(locked) == sorted(locked)
    locked, _ = uvlock.lock_closure(CLOSURE_LOCK, "proj", [], "3.13")
    assert sorted(locked) == ["filelock", "pysocks", "requests", "sympy", "torch", "urllib3"]  # sympy: Python 3.13
    locked, _ = uvlock.lock_closure(CLOSURE_LOCK, "proj", ["*"], "3.12")
    assert {"not-synced", "pandas"} <= set(locked)  # --all-extras


def test_last_change_is_the_newest_commit_touching_the_paths_in_utc(tmp_path: Path) -> None:
    def git(*args: str, date: str = "") -> str:
        env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
               "GIT_COMMITTER_EMAIL": "a@b", "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1",
               **({"GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date} if date else {})}
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True, text=True,
                              env={**os.environ, **env}).stdout.strip()

    git("init", "-q")
    for name, date in (("a", "2025-07-21T09:37:14-07:00"), ("b", "2025-07-22T01:00:00+02:00"),
                       ("a", "2025-07-23T00:00:00+00:00")):
        (tmp_path / name).write_text(date)
        git("add", name)
        git("commit", "-q", "-m", name, date=date)
    first, second, third = git("log", "--format=%H").split("\n")[::-1]
    repo = gitrepo.Git(str(tmp_path))
    assert repo.last_change(second, ["a"]) == "2025-07-21T16:37:14Z"  # at or before the commit, in UTC
    assert repo.last_change(second, ["a", "b"]) == "2025-07-21T23:00:00Z"
    assert repo.last_change(third, ["a", "b"]) == "2025-07-23T00:00:00Z"
    assert repo.last_change(first, ["b"]) is None


def test_yaml_config_and_sdk_versions() -> None:
    cfg = buildspec.parse_yaml_mapping(
        'metadata:\n  framework_version: "2.13.0"\n  device_type: "gpu"\n'
        'build:\n  dockerfile: "docker/pytorch/Dockerfile.cuda"\n  target: "sagemaker"  # the SageMaker one\n'
        '  transformer_engine_version: "2.17.0"\n')
    assert cfg["build"] == {"dockerfile": "docker/pytorch/Dockerfile.cuda", "target": "sagemaker",
                            "transformer_engine_version": "2.17.0"}
    sdk: dict[str, Any] = {"training": {"versions": {"4.49.0": {"version_aliases": {}, "pytorch2.5.1": {}},
                                     "4.17.0": {"pytorch1.10.2": {}, "tensorflow2.6.3": {}}}}}
    assert huggingface.sdk_training_versions(sdk) == [("4.17.0", "1.10.2"), ("4.49.0", "2.5.1")]


def test_output_is_deterministic_json() -> None:
    data = {"b": [1, {"z": 1, "a": None}], "a": "x"}
    assert generate.dumps(data) == json.dumps(data, indent=1, sort_keys=True) + "\n"
    assert generate.dumps(data) == generate.dumps(json.loads(generate.dumps(data)))


# ---------------------------------------------------------------------------------------------
# (b) the committed data against the hand-checked facts in dlc-contents.md
# ---------------------------------------------------------------------------------------------

IMAGES: list[dict[str, Any]] = json.loads(DATA.read_text())["images"]
BY_ID = {img["id"]: img for img in IMAGES}
PYTORCH = [img for img in IMAGES if img["flavour"] == "pytorch"]


def fam(image: dict[str, Any]) -> tuple[int, ...]:
    return tuple(int(x) for x in image["family"].split("."))


def names(image: dict[str, Any]) -> set[str]:
    return {p["name"] for p in image["packages"]}


def pkg(image_id: str, name: str) -> dict[str, Any]:
    return next(p for p in BY_ID[image_id]["packages"] if p["name"] == name)


def ids(lo: str, hi: str, device: str | None = None) -> list[str]:
    low, high = (tuple(int(x) for x in v.split(".")) for v in (lo, hi))
    return [img["id"] for img in PYTORCH if low <= fam(img) <= high and device in (None, img["device"])]


def disagree(image_ids: list[str], bad: dict[str, str]) -> list[Any]:
    """Parameters for ``image_ids``; those in ``bad`` are strict xfails carrying where AWS's files say
    otherwise (the reference and the data are both left as they are)."""
    return [pytest.param(i, marks=pytest.mark.xfail(strict=True, reason=bad[i])) if i in bad else i
            for i in image_ids]


def test_one_image_per_family_and_device() -> None:
    families = ["1.12", "1.13"] + [f"2.{m}" for m in range(14)]
    assert [img["id"] for img in PYTORCH] == [f"pytorch-{f}-{d}" for f in families for d in ("cpu", "gpu")]
    legacy, current = "f06ada0e08ec0be1627f201691856eb8c28abd17", "e0ecedea6a1c56d6b5914f9cfb2fec5c548e67e0"
    for img in IMAGES:
        assert (img["cuda"] is None) == (img["device"] == "cpu")
        if img["flavour"] == "pytorch":
            assert img["source"]["commit"] == (current if fam(img) >= (2, 11) else legacy)
        else:  # an SDK version whose files changed since is described at an older commit
            assert len(img["source"]["commit"]) == 40
        assert [p["name"] for p in img["packages"]] == sorted({p["name"] for p in img["packages"]})


@pytest.mark.parametrize("image_id", [img["id"] for img in PYTORCH])
def test_every_pytorch_image_ships_torchvision_and_torchaudio(image_id: str) -> None:
    # dlc-contents.md: "Every PyTorch DLC ships torchvision and torchaudio (matching its torch)"
    assert {"torch", "torchvision", "torchaudio"} <= names(BY_ID[image_id])


@pytest.mark.parametrize("image_id", [img["id"] for img in PYTORCH])
def test_no_pytorch_image_installs_lightning_or_transformers(image_id: str) -> None:
    # dlc-contents.md: "no PyTorch DLC installs Lightning or transformers"
    assert not names(BY_ID[image_id]) & {"lightning", "pytorch-lightning", "transformers"}


PYBIND11_1_13_CPU = ("pytorch/training/docker/1.13/py3/Dockerfile.cpu@f06ada0e08: neither the common stage's "
                     "mamba install (line 121) nor its pip install (line 146) names pybind11")


@pytest.mark.parametrize("image_id", disagree(ids("1.13", "2.10"), {"pytorch-1.13-cpu": PYBIND11_1_13_CPU}))
def test_common_stage_h5py_ipython_cython_pybind11(image_id: str) -> None:
    # dlc-contents.md: "1.13–2.10 common stage: also h5py, ipython, cython, pybind11"
    assert {"h5py", "ipython", "cython", "pybind11"} <= names(BY_ID[image_id])


@pytest.mark.parametrize("image_id", ids("2.4", "2.10"))
def test_spacy_from_2_4(image_id: str) -> None:
    # dlc-contents.md: "2.4+: spacy, ninja" (in the 1.13–2.10 common-stage list)
    assert "spacy" in names(BY_ID[image_id])


def test_no_spacy_before_2_4() -> None:
    assert len(ids("1.12", "2.3")) == 12  # 1.12, 1.13, 2.0-2.3: a CPU and a GPU image each
    assert not any("spacy" in names(BY_ID[i]) for i in ids("1.12", "2.3"))


_NINJA_CONDA = ("{f}@f06ada0e08 line {n}: ninja is only in the common stage's conda-forge (mamba) install, "
                "the native build tool, no Python distribution (skipped by CONDA_SKIP)")
_NINJA_CPU = "pytorch/training/docker/{v}/py3/Dockerfile.cpu@f06ada0e08 installs no ninja at all"
NINJA_BAD = {
    "pytorch-2.4-gpu": _NINJA_CONDA.format(f="pytorch/training/docker/2.4/py3/cu124/Dockerfile.gpu", n=223),
    "pytorch-2.5-gpu": _NINJA_CONDA.format(f="pytorch/training/docker/2.5/py3/cu124/Dockerfile.gpu", n=268),
    **{f"pytorch-{v}-cpu": _NINJA_CPU.format(v=v) for v in ("2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10")},
}


@pytest.mark.parametrize("image_id", disagree(ids("2.4", "2.10"), NINJA_BAD))
def test_ninja_from_2_4(image_id: str) -> None:
    # dlc-contents.md: "2.4+: spacy, ninja"
    assert "ninja" in names(BY_ID[image_id])


@pytest.mark.parametrize("image_id", [img["id"] for img in PYTORCH])
def test_black_only_in_2_8_and_2_9(image_id: str) -> None:
    # dlc-contents.md: "2.8–2.9: black"
    assert ("black" in names(BY_ID[image_id])) == (image_id in ids("2.8", "2.9"))


@pytest.mark.parametrize("image_id", ids("2.7", "2.13"))
def test_no_torchtext_from_2_7(image_id: str) -> None:
    # dlc-contents.md: "Not shipped although easy to assume: torchtext from 2.7"
    assert "torchtext" not in names(BY_ID[image_id])


def test_torchtext_before_2_7_where_installed() -> None:
    # from AWS's files: installed 2.0-2.6 (conda or wheel URL); 1.12 and 1.13 never installed it
    assert [i for i in ids("1.12", "2.6") if "torchtext" in names(BY_ID[i])] == ids("2.0", "2.6")


_DEEPSPEED_2_11 = ("docker/pytorch/{v}/{d}/pyproject.toml@e0ecedea6a line 9: [project].dependencies "
                   "has \"deepspeed=={pin}\"")
DEEPSPEED_BAD = {f"pytorch-{v}-{dev}": _DEEPSPEED_2_11.format(v=v, d=d, pin=pin)
                 for v, pin in (("2.11", "0.18.8"), ("2.12", "0.18.8"), ("2.13", "0.19.2"))
                 for dev, d in (("cpu", "cpu"), ("gpu", "cuda"))}


@pytest.mark.parametrize("image_id", disagree(ids("2.1", "2.13"), DEEPSPEED_BAD))
def test_no_deepspeed_from_2_1(image_id: str) -> None:
    # dlc-contents.md: "deepspeed, smdebug, smdistributed-* from 2.6 (deepspeed and smdebug already from 2.1)"
    assert "deepspeed" not in names(BY_ID[image_id])


@pytest.mark.parametrize("image_id", ids("2.1", "2.13"))
def test_no_smdebug_from_2_1(image_id: str) -> None:
    assert "smdebug" not in names(BY_ID[image_id])


def test_deepspeed_and_smdebug_before_2_1() -> None:
    # which: ZeRO-2D deepspeed wheels in the 1.12/1.13 GPU images; smdebug (sagemaker-debugger from source)
    # in 1.12, 1.13 and 2.0 CPU (the 2.0 cu121 GPU image has neither)
    assert [i for i in ids("1.12", "2.0") if "deepspeed" in names(BY_ID[i])] == ["pytorch-1.12-gpu", "pytorch-1.13-gpu"]
    assert [i for i in ids("1.12", "2.0") if "smdebug" in names(BY_ID[i])] == [
        "pytorch-1.12-cpu", "pytorch-1.12-gpu", "pytorch-1.13-cpu", "pytorch-1.13-gpu", "pytorch-2.0-cpu"]


@pytest.mark.parametrize("image_id", ids("2.6", "2.13"))
def test_no_smdistributed_from_2_6(image_id: str) -> None:
    assert not {n for n in names(BY_ID[image_id]) if n.startswith("smdistributed")}


@pytest.mark.parametrize("image_id", ids("2.3", "2.5"))
def test_no_torchdata_in_2_3_to_2_5(image_id: str) -> None:
    assert "torchdata" not in names(BY_ID[image_id])


@pytest.mark.parametrize("image_id", ids("2.6", "2.6"))
def test_no_fastai_in_2_6(image_id: str) -> None:
    assert "fastai" not in names(BY_ID[image_id])


@pytest.mark.parametrize("image_id", [img["id"] for img in PYTORCH])
def test_s3torchconnector_from_2_4(image_id: str) -> None:
    # dlc-contents.md: "s3torchconnector before 2.4" is not shipped (and, from AWS's files, 2.4-2.10 install it)
    assert ("s3torchconnector" in names(BY_ID[image_id])) == (image_id in ids("2.4", "2.10"))


SMDDP_2_0 = ("pytorch/training/buildspec-2-0-sm.yml@f06ada0e08 names two SageMaker GPU images; the cu121 one "
             "(the one with latest_release_tag, described here) installs no SMD_DATA_PARALLEL_URL: "
             "pytorch/training/docker/2.0/py3/cu121/Dockerfile.gpu has none, cu118's installs it at line 650")


@pytest.mark.parametrize("image_id", disagree(ids("1.12", "2.5", "gpu"), {"pytorch-2.0-gpu": SMDDP_2_0}))
def test_smddp_in_gpu_images_up_to_2_5(image_id: str) -> None:
    # dlc-contents.md: "SMDDP (smdistributed-dataparallel, SMD_DATA_PARALLEL_URL) is installed up to 2.5 GPU images"
    p = pkg(image_id, "smdistributed-dataparallel")
    assert p["version"] and p["requirement"].startswith("smdistributed-dataparallel==")


@pytest.mark.parametrize("image_id", ids("2.6", "2.13", "gpu") + ids("1.12", "2.13", "cpu"))
def test_no_smddp_from_2_6_nor_on_cpu(image_id: str) -> None:
    assert "smdistributed-dataparallel" not in names(BY_ID[image_id])


def test_1_12_cpu_has_no_mpi_horovod_deepspeed_smdistributed() -> None:
    # dlc-contents.md: "1.12 CPU has no mpi4py, pybind11, horovod, deepspeed, smdistributed"
    got = names(BY_ID["pytorch-1.12-cpu"])
    assert not got & {"mpi4py", "pybind11", "horovod", "deepspeed"}
    assert not {n for n in got if n.startswith("smdistributed")}
    assert {"mpi4py", "pybind11", "horovod", "deepspeed"} <= names(BY_ID["pytorch-1.12-gpu"])


@pytest.mark.parametrize("image_id", ids("2.11", "2.13", "gpu"))
def test_2_11_plus_gpu(image_id: str) -> None:
    # dlc-contents.md: "2.11+ GPU (cuda/pyproject.toml) has no mpi4py and no opencv-python but installs
    # flash-attn and transformer-engine in Dockerfile.cuda"
    got = names(BY_ID[image_id])
    assert not got & {"mpi4py", "opencv-python"}
    assert pkg(image_id, "flash-attn")["via"] == "pip" and pkg(image_id, "flash-attn")["version"]
    assert pkg(image_id, "transformer-engine")["requirement"].startswith("transformer-engine[pytorch]==")
    assert pkg(image_id, "torch")["via"] == "uv" and pkg(image_id, "torch")["lines"] == []


@pytest.mark.parametrize("image_id", ids("2.11", "2.13", "cpu"))
def test_2_11_plus_cpu_takes_the_cpu_torch_of_the_lock(image_id: str) -> None:
    assert pkg(image_id, "torch")["version"].endswith("+cpu")
    assert {"mpi4py", "opencv-python"} <= names(BY_ID[image_id])


@pytest.mark.parametrize("image_id", [img["id"] for img in IMAGES])
def test_date_and_locked(image_id: str) -> None:
    img = BY_ID[image_id]
    assert re.fullmatch(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ", img["date"])
    if img["flavour"] == "pytorch" and fam(img) >= (2, 11):
        locked = img["locked"]
        assert locked and img["packages"], image_id
        assert list(locked) == sorted(locked) and all(isinstance(v, str) for v in locked.values())
        # every package the lock gives is in the closure at the same version; the Dockerfile's own pip installs
        # (flash-attn, transformer-engine in the GPU images) are not in the lock
        assert {p["name"]: p["version"] for p in img["packages"] if p["via"] == "uv"}.items() <= locked.items()
        assert {p["name"] for p in img["packages"] if p["via"] != "uv"} == (
            set() if img["device"] == "cpu" else {"flash-attn", "transformer-engine"})
    else:
        assert img["locked"] is None


def test_pytorch_2_13_cpu_lock_closure() -> None:
    img = BY_ID["pytorch-2.13-cpu"]
    locked = img["locked"]
    assert locked["torch"] == "2.13.0+cpu" and locked["pandas"] == "2.3.3" and "numpy" in locked
    assert img["packages"]
    assert names(img) <= set(locked)
    assert all(locked[p["name"]] == p["version"] for p in img["packages"])
    assert len(locked) > 2 * len(img["packages"])  # the transitive closure, not just the direct dependencies
    assert "mpi4py" in locked and "mpi4py" not in BY_ID["pytorch-2.13-gpu"]["locked"]
    assert BY_ID["pytorch-2.13-gpu"]["locked"]["torch"].endswith("+cu130")


def test_dates() -> None:
    # the newest change of pytorch/training/docker/2.5/py3/cu124/Dockerfile.gpu at or before the legacy commit
    assert BY_ID["pytorch-2.5-gpu"]["date"] == "2025-07-21T16:37:14Z"
    # 2.11+: Dockerfile, pyproject.toml, uv.lock and image config; the newest here is a lock update of all six
    assert {BY_ID[i]["date"] for i in ids("2.11", "2.13")} == {"2026-08-13T23:12:21Z"}


@pytest.mark.parametrize("image_id", [img["id"] for img in PYTORCH])
def test_sagemaker_experiments_where_installed(image_id: str) -> None:
    # dlc-contents.md: "sagemaker-experiments imports as smexperiments"; AWS's files install it up to 2.9
    assert ("sagemaker-experiments" in names(BY_ID[image_id])) == (image_id in ids("1.12", "2.9"))


@pytest.mark.parametrize("image_id", [img["id"] for img in PYTORCH])
def test_common_packages(image_id: str) -> None:
    # dlc-contents.md: "pandas, scikit-learn, ..., pillow, opencv (GPU images before 2.11; CPU images), pyyaml,
    # requests, boto3, the sagemaker SDK" (scipy is left out here: 1.12 and the 2.11+ GPU images get it only as
    # a dependency, not by name)
    img = BY_ID[image_id]
    want = {"pandas", "scikit-learn", "pillow", "pyyaml", "requests", "boto3", "sagemaker"}
    if img["device"] == "cpu" or fam(img) < (2, 11):
        want.add("opencv-python")
    assert want <= names(img)


def test_1_13_cpu_adds_huggingface_hub_and_safetensors() -> None:
    # dlc-contents.md: "1.13 CPU adds huggingface-hub and safetensors"
    assert {"huggingface-hub", "safetensors"} <= names(BY_ID["pytorch-1.13-cpu"])
    assert not {"huggingface-hub", "safetensors"} & names(BY_ID["pytorch-1.13-gpu"])


def test_hugging_face_4_49_0() -> None:
    # dlc-contents.md: "Hugging Face 4.49.0 / PyTorch 2.5.1 / py311 (cu124): FROM
    # pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker; transformers[sklearn,sentencepiece,audio,vision,
    # pipelines] 4.49.0, datasets 3.3.2, huggingface-hub 0.29.1, diffusers 0.32.2, evaluate 0.4.3, accelerate 1.4.0,
    # trl 0.15.2, peft 0.14.0, flash-attn 2.7.3 (CUDA only)"
    img = BY_ID["huggingface-4.49.0-pytorch-2.5-gpu"]
    assert (img["transformers_version"], img["framework_version"], img["base"], img["device"]) == (
        "4.49.0", "2.5.1", "pytorch-2.5-gpu", "gpu")
    assert img["base_tag"] == "pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker"
    assert img["python"].startswith("3.11") and img["cuda"].startswith("12.4")
    versions = {p["name"]: p["version"] for p in img["packages"]}
    assert {k: versions.get(k) for k in ("transformers", "datasets", "huggingface-hub", "diffusers", "evaluate",
                                         "accelerate", "trl", "peft", "flash-attn")} == {
        "transformers": "4.49.0", "datasets": "3.3.2", "huggingface-hub": "0.29.1", "diffusers": "0.32.2",
        "evaluate": "0.4.3", "accelerate": "1.4.0", "trl": "0.15.2", "peft": "0.14.0", "flash-attn": "2.7.3"}
    assert pkg(img["id"], "transformers")["requirement"] == (
        "transformers[sklearn,sentencepiece,audio,vision,pipelines]==4.49.0")
    assert img["source"]["path"] == "huggingface/pytorch/training/docker/2.5/py3/cu124/Dockerfile.gpu"


def test_hugging_face_4_56_2() -> None:
    # dlc-contents.md: "4.56.2 → pytorch2.8.0 py312"
    img = BY_ID["huggingface-4.56.2-pytorch-2.8-gpu"]
    assert (img["transformers_version"], img["framework_version"]) == ("4.56.2", "2.8.0")
    assert img["base"] == "pytorch-2.8-gpu"
    assert img["python"].startswith("3.12")
    assert pkg(img["id"], "transformers")["version"] == "4.56.2"


def test_hugging_face_images_follow_the_sdk() -> None:
    hf = {img["transformers_version"]: img for img in IMAGES if img["flavour"] == "huggingface"}
    assert {"4.46.1", "4.48.0", "4.49.0", "4.56.2"} <= set(hf)
    assert hf["4.46.1"]["base"] == hf["4.48.0"]["base"] == "pytorch-2.3-gpu"
    for img in hf.values():
        assert img["id"] == f"huggingface-{img['transformers_version']}-pytorch-{img['family']}-gpu"
        assert img["base"] in BY_ID and BY_ID[img["base"]]["device"] == "gpu"
        assert pkg(img["id"], "transformers")["version"] == img["transformers_version"]
        assert "torch" not in names(img)  # only what the HF Dockerfile itself installs


# ---------------------------------------------------------------------------------------------
# (c) the committed file is what the generator writes
# ---------------------------------------------------------------------------------------------


def test_regenerating_gives_the_committed_file(tmp_path: Path) -> None:
    if not (MIRROR / "HEAD").exists():
        pytest.skip(f"no mirror of aws/deep-learning-containers at {MIRROR}")
    sdk_json = generate.default_sdk_json()
    if sdk_json is None:
        pytest.skip("the sagemaker SDK (image_uri_config/huggingface.json) is not installed")
    out = tmp_path / "dlc_images.json"
    assert generate.main(["--repo", str(MIRROR), "--sdk-huggingface-json", sdk_json, "--out", str(out)]) == 0
    assert out.read_text() == DATA.read_text()

