"""The docker backend's job subnet: keyed by the job's name, so ``plan`` and ``run`` agree.

Found as a flake of ``tests/jobs/test_launch_spec.py::test_plan_is_what_runs[docker]``: planned
while another job's network held ``10.0.0.0/24``, the job planned ``10.0.1.2`` for ``algo-1`` and
ran on ``10.0.0.2`` once that network was gone. The engine is faked here by its network list only
(``client.networks.list()`` and each network's ``IPAM.Config``, as the docker SDK returns them).
"""

from __future__ import annotations

import ipaddress
from types import SimpleNamespace
from typing import Any

import pytest

from emulator.backends.docker.backend import SUBNET_TRIES, _free_subnet
from emulator.inhost.protocol import JOB_SUBNET


def engine(*subnets: str) -> Any:
    networks = [SimpleNamespace(attrs={"IPAM": {"Config": [{"Subnet": s}]}}) for s in subnets]
    networks.append(SimpleNamespace(attrs={"IPAM": {"Config": None}}))  # "none" and "host" have none
    return SimpleNamespace(networks=SimpleNamespace(list=lambda: networks))


def test_a_job_name_chooses_the_same_subnet_while_other_jobs_come_and_go() -> None:
    alone = _free_subnet(engine(), JOB_SUBNET, "spec-docker")
    others = [_free_subnet(engine(), JOB_SUBNET, f"job-{i}") for i in range(20)]
    assert len(set(others)) > 10  # names spread over the subnets, so concurrent jobs rarely meet
    # another job's network on the first /24, and on any subnet but this job's: the same choice
    assert _free_subnet(engine("10.0.0.0/24", *(s for s in others if s != alone)), JOB_SUBNET,
                        "spec-docker") == alone


def test_a_held_subnet_moves_the_job_to_the_next_free_one_wrapping_around() -> None:
    first = ipaddress.ip_network(JOB_SUBNET)
    every = [str(ipaddress.ip_network((int(first.network_address) + k * 256, 24))) for k in range(SUBNET_TRIES)]
    key = next(f"job-{i}" for i in range(1000) if _free_subnet(engine(), JOB_SUBNET, f"job-{i}") == every[-1])
    assert _free_subnet(engine(every[-1]), JOB_SUBNET, key) == every[0]
    assert _free_subnet(engine(every[-1], every[0], "10.0.1.0/25"), JOB_SUBNET, key) == every[2]
    assert _free_subnet(engine(), JOB_SUBNET) == every[0]  # no key: the first free one, as before


def test_no_free_subnet_is_a_clear_error() -> None:
    from emulator.errors import BackendUnavailable

    first = ipaddress.ip_network(JOB_SUBNET)
    with pytest.raises(BackendUnavailable, match=r"no free /24 subnet near 10\.0\.0\.0/24"):
        _free_subnet(engine(str(ipaddress.ip_network((int(first.network_address), 16)))), JOB_SUBNET, "x")
