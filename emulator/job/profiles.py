"""Profiles: how faithfully a job's *time* follows SageMaker's, chosen per job.

``exact`` (the CLI's and the SDK sessions' default) runs every host as SageMaker would, with the
toolkit's fixed sleeps and a fresh interpreter for every process. ``ci`` (the default of the
pytest fixture, ``python -m emulator launch`` under ``nox -s emulate``) turns on every speed-up
that leaves what a training script can observe unchanged except time — its environment, argv,
files, hostname, rank, exit code, failure text and artifacts (``tests/jobs/test_profiles_equivalence.py``
runs the same jobs in both profiles and compares all of it):

- ``short_toolkit_sleeps``: the MPI-family runners' fixed 30-s sleeps after ``mpirun`` are capped
  at 1 s, their 1-s polls for each other's ``sshd`` and for ``orted`` at 0.2 s (in-host
  ``_sm_emulator_toolkit``);
- ``toolkit_skips_torch_import``: sagemaker-pytorch-training imports torch in every host's toolkit
  process only to set ``SM_DLC_TORCH_VERSION``; it reads the same string from the installed
  ``torch/version.py`` instead (about 3 s of CPU per host; in-host ``_sm_emulator_toolkit``);
- ``timeline_png``: off — only ``timeline.json`` is written; ``python -m emulator timeline
  JOB_DIR`` draws the picture (the emulator's own artifact, never a script's).

Not in ``ci``: fast start (``fast_start=True``, ``--fast-start``; process backend), which forks
the ranks from a pre-imported interpreter. What torch and the job read at import time then comes
from the host's environment rather than the rank's, and PIDs and parent processes differ, so it
changes what a script can observe and stays a per-job opt-in, recorded as a deviation. It forks only
where ``PYTHONHASHSEED`` is a fixed number (forked ranks share one ``str`` hash seed), so it could not
speed up most jobs as a default anyway.

Each speed-up a job used is listed in ``job.json`` under ``Emulator.Deviations``
(:mod:`emulator.job.deviations`). Per-job switches (``short_toolkit_sleeps=True``,
``fast_start=True``) add a speed-up to any profile, ``exact`` included.

Where the profile is chosen: ``--profile`` (CLI), ``profile=`` (``emulator.run``, the SDK
sessions, the fixture's ``sagemaker_job``), ``--emulator-profile`` (pytest). Where none is chosen,
``SAGEMAKER_EMULATOR_PROFILE`` names it for every entry point (the CLI, ``emulator.run``, the SDK
sessions, ``python -m emulator launch``; the pytest fixture keeps its own default, ``ci``), and
``exact`` when it is unset. An unknown name is refused before anything starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..errors import RequestError

#: The environment variable launchers (``python -m emulator launch``) read the profile from.
PROFILE_VAR = "SAGEMAKER_EMULATOR_PROFILE"
EXACT = "exact"
CI = "ci"


@dataclass(frozen=True)
class Profile:
    """The speed-ups one profile turns on (see the module docstring)."""

    name: str
    short_toolkit_sleeps: bool
    toolkit_skips_torch_import: bool
    fast_start: bool
    timeline_png: bool
    summary: str

    def with_requested(self, *, short_toolkit_sleeps: bool, fast_start: bool) -> Profile:
        """This profile plus the speed-ups a request asked for itself."""
        return replace(self, short_toolkit_sleeps=self.short_toolkit_sleeps or short_toolkit_sleeps,
                       fast_start=self.fast_start or fast_start)


PROFILES: Mapping[str, Profile] = {
    EXACT: Profile(EXACT, short_toolkit_sleeps=False, toolkit_skips_torch_import=False, fast_start=False,
                   timeline_png=True,
                   summary="every host as on SageMaker, fixed sleeps and process starts included"),
    CI: Profile(CI, short_toolkit_sleeps=True, toolkit_skips_torch_import=True, fast_start=False,
                timeline_png=False,
                summary="every speed-up that changes nothing a script can observe except time"),
}


def get(name: object, *, field: str = "profile") -> Profile:
    """The profile called ``name``; a :class:`RequestError` naming the allowed ones otherwise."""
    if isinstance(name, str) and name in PROFILES:
        return PROFILES[name]
    raise RequestError(field, f"unknown profile {name!r}",
                       allowed=", ".join(f"{p.name} ({p.summary})" for p in PROFILES.values()))


def from_environment(default: str = EXACT, env: Mapping[str, str] | None = None) -> str:
    """The profile ``SAGEMAKER_EMULATOR_PROFILE`` names (``default`` when unset), checked."""
    value = (os.environ if env is None else env).get(PROFILE_VAR) or default
    return get(value, field=PROFILE_VAR).name


def resolve(name: str | None, *, field: str = "profile") -> str:
    """The profile a job runs in: ``name`` when one was chosen (checked), otherwise the one
    ``SAGEMAKER_EMULATOR_PROFILE`` names, ``exact`` when it is unset. Every entry point's default
    goes through here, so one variable sets the profile of a whole CI run."""
    return from_environment() if name is None else get(name, field=field).name


__all__ = ["CI", "EXACT", "PROFILES", "PROFILE_VAR", "Profile", "from_environment", "get", "resolve"]
