"""``python -m emulator cache`` (emulator/backends/store.py) against a real engine: every image the
emulator built is listed, and one a container uses is kept by ``prune --all`` and named. Oracle:
the engine's own listing (``docker images --filter label=sagemaker-emulator.inputs``) and the
container it was asked to create. Nothing is removed here (the images are the suite's)."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from emulator.backends import store

IMAGE = "sagemaker-emulator:latest"


@pytest.mark.docker
def test_an_image_a_container_uses_is_listed_and_kept(docker_ready: None) -> None:
    name = f"sm-emulator-test-store-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "create", "--name", name, "--network", "none", IMAGE], check=True,
                   capture_output=True, text=True)
    try:
        found = [e for e in store.entries() if e.kind == "image"]
        listed = subprocess.run(["docker", "images", "-q", "--no-trunc", "--filter", f"label={store.IMAGE_LABEL}"],
                                check=True, capture_output=True, text=True).stdout.split()
        assert len(found) == len(set(listed))
        ours = [e for e in found if IMAGE in e.where.split()]
        assert len(ours) == 1 and f"container {name}" in ours[0].users, ours
        go, kept = store.chosen(found, everything=True)
        assert ours[0] in kept and ours[0] not in go
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
