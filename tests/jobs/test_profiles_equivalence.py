"""The ``ci`` profile changes nothing a script can observe but time: the same jobs in both profiles.

For every distribution (plain, torch_distributed with a Lightning DDP fit, pytorchddp,
smdistributed, mpi) and a failing torch_distributed job, the same 2-host job runs in the ``exact`` and the
``ci`` profile (process backend). Every rank writes what it sees of itself before its first
third-party import (``tests/profile_scripts/process_dump.py``: environment, ``argv``, ``/proc/self/cmdline``
and ``environ``, ``sys.path``, stdio, signals, limits, capabilities, cwd, hostname, every file under
``/opt/ml``, then torch's thread counts); the job's status, every host's exit code, the failure
reason and the artifacts' members are compared too. Any difference not in :data:`LISTED` (or, for the
Open MPI names in :data:`PID_DERIVED`, one beyond their numbers) fails
(the list of the ``ci`` profile's differences in ``docs/reference/profiles.md``; ``test_comparison_finds_a_difference``
proves the comparison can fail). The ``ci`` jobs must really have run with the profile's
speed-ups, recorded in ``Emulator.Deviations``; the MPI-family ones' toolkits must have skipped
the fixed 30-s sleep (``emulator/job/profiles.py``; the sleep itself: sagemaker-training 5.1.4,
``mpi.py``, ``MasterRunner._wait_...`` / ``time.sleep(30)`` after ``mpirun`` exits).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import emulator
from emulator.job.result import JobResult

from ..conftest import require_mpi

#: Its own source dir, outside tests/scripts: the preflight reads a source dir's files, sub-folders too,
#: and process_dump.py's Lightning import would make it ask every tests/scripts job for Lightning.
SCRIPTS = Path(__file__).parents[1] / "profile_scripts"
DISTRIBUTIONS: dict[str, Any] = {
    "plain": None,
    "torch_distributed": {"torch_distributed": {"enabled": True}},
    "pytorchddp": {"pytorchddp": {"enabled": True}},
    "smdistributed": {"smdistributed": {"dataparallel": {"enabled": True}}},
    "mpi": {"mpi": {"enabled": True, "processes_per_host": 2}},
}
#: What may differ between the profiles, and why (the list in ``docs/reference/profiles.md``).
LISTED = {
    "TORCHELASTIC_RUN_ID": "random per torchrun launch",
    "TORCHELASTIC_ERROR_FILE": "a temp path chosen by torchrun",
    "EMULATOR_SHORT_TOOLKIT_SLEEPS": "the emulator's own switch for the ci profile's short sleeps",
    "EMULATOR_TOOLKIT_SKIPS_TORCH_IMPORT": "the emulator's own switch for the ci profile's torch-free toolkit",
    "OMPI_MCA_orte_hnp_uri": "mpirun's contact address: a port chosen per launch",
    "OMPI_MCA_orte_local_daemon_uri": "orted's contact address: a port chosen per launch",
    "OMPI_MCA_orte_precondition_transports": "a random key per mpirun launch",
    "SSH_CLIENT": "the ssh client's source port (MPI ranks on workers, started through sshd)",
    "SSH_CONNECTION": "the ssh client's source port (MPI ranks on workers, started through sshd)",
}
#: Prefixes of listed names: PMIx's server URIs (PMIX_SERVER_URI2, ..._URI41: ports per launch).
LISTED_PREFIXES = ("PMIX_SERVER_URI",)
#: Open MPI names whose numbers come from mpirun's PID in its host (the job family is a hash of the
#: hostname and that PID; the session folders are named by it): compared with every number masked,
#: so only the numbers may differ. That PID differs between any two launches (sshd forks a process
#: for each connection the worker's toolkit polls with), and by one more between the profiles: the
#: toolkit's ``import torch`` in ``exact`` starts a thread, which takes a PID in the host.
PID_DERIVED = ("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMIX_ID", "PMIX_SERVER_TMPDIR",
               "PMIX_DSTORE_ESH_BASE_PATH", "PMIX_DSTORE_21_BASE_PATH", "OMPI_MCA_orte_jobfam_session_dir",
               "OMPI_FILE_LOCATION")
_NUMBER = re.compile(r"\d+")
#: Keys of a dump that hold PIDs or a process's position among processes (listed: PIDs differ).
PID_KEYS = ("fds",)
_TIME = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[.,]?\d*|\b\d{10}\.\d+\b")


def dumps(result: JobResult, prefix: str = "dump-") -> dict[str, dict[str, Any]]:
    return {name: json.loads(data) for name, data in result.model_files().items() if name.startswith(prefix)}


def _masked(key: str, value: str | None) -> str | None:
    return _NUMBER.sub("#", value) if key in PID_DERIVED and value is not None else value


def _env_problems(name: str, what: str, a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    return [f"{name}: {what} {key}: {a.get(key)!r} != {b.get(key)!r}"
            for key in sorted(set(a) | set(b))
            if key not in LISTED and not key.startswith(LISTED_PREFIXES)
            and _masked(key, a.get(key)) != _masked(key, b.get(key))]


def _environ_map(items: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in items if "=" in item)


def compare(exact: Mapping[str, Mapping[str, Any]], ci: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Unlisted differences between the dumps of the two profiles."""
    if set(exact) != set(ci):
        return [f"different dumps: {sorted(exact)} vs {sorted(ci)}"]
    problems = []
    for name in sorted(exact):
        a, b = exact[name], ci[name]
        for key in sorted(set(a) | set(b)):
            if key in PID_KEYS:
                continue
            if key == "env":
                problems += _env_problems(name, "env", a["env"], b["env"])
            elif key == "proc_environ":
                problems += _env_problems(name, "/proc/self/environ", _environ_map(a[key]), _environ_map(b[key]))
            elif a.get(key) != b.get(key):
                problems.append(f"{name}: {key}: {a.get(key)!r} != {b.get(key)!r}")
    return problems


def job_facts(result: JobResult) -> dict[str, Any]:
    """The job-level facts a script's outcome shows: status, exit codes, failure reason, artifacts."""
    reason = result.failure_reason
    if reason:  # its head: what follows (torchrun's and the ranks' interleaved stderr, PIDs and
        # times whose lengths shift the 1024-character cut) differs between any two runs
        reason = "\n".join(reason.splitlines()[:3])
    return {"status": result.status, "secondary": result.secondary_status,
            # a failed job: the first failing host's exit (the others are stopped when it fails, and
            # whether one ends before the stop or is killed by it is a race in any two runs)
            "exits": {h.name: (h.exit_code, h.signal) for h in result.hosts
                      if result.status == "Completed" or h.name == result.first_failure},
            "failure_reason": reason,
            "model": sorted(result.model_files()), "output": sorted(result.output_files())}


def run(profile: str, dist: Any, out: Path, name: str, *args: str) -> JobResult:
    return emulator.run(entry_point="process_dump.py", source_dir=SCRIPTS, instance_count=2,
                        instance_type="ml.p4d.24xlarge", gpus_per_host=2, distribution=dist,
                        hyperparameters={"msg": "a b; c", **{a.lstrip("-"): "" for a in args}},
                        output_path=out / profile, job_name=f"eq-{name}".replace("_", "-"),
                        echo=False, stop_grace=2, profile=profile)


def both_profiles(dist: Any, out: Path, name: str, *args: str) -> tuple[JobResult, JobResult]:
    """The same job in ``exact`` and ``ci``, at the same time (two jobs at once are independent:
    ``tests/jobs/test_jobs.py::test_two_jobs_at_once_do_not_interfere``): the ``exact`` MPI-family
    jobs' 30-s toolkit sleep after ``mpirun`` then overlaps the ``ci`` job instead of idling."""
    with ThreadPoolExecutor(2) as pool:
        exact = pool.submit(run, "exact", dist, out, name, *args)
        ci = pool.submit(run, "ci", dist, out, name, *args)
        return exact.result(), ci.result()


#: torch_distributed runs once, with the Lightning fit: its ranks dump before their Lightning import
#: (process_dump.py), so one job compares what a plain torch_distributed job would and the fit too.
CASES = [*((name, dist, ()) for name, dist in DISTRIBUTIONS.items() if name != "torch_distributed"),
         ("torch_distributed-lightning", DISTRIBUTIONS["torch_distributed"], ("--lightning",)),
         ("failing", DISTRIBUTIONS["torch_distributed"], ("--fail",))]


@pytest.mark.parametrize(("name", "dist", "args"), CASES, ids=[c[0] for c in CASES])
def test_ci_profile_changes_nothing_a_script_sees(name: str, dist: Any, args: tuple[str, ...],
                                                  tmp_path: Path) -> None:
    if name in ("pytorchddp", "smdistributed", "mpi"):
        require_mpi()
    exact, ci = both_profiles(dist, tmp_path, name, *args)
    assert job_facts(ci) == job_facts(exact)
    assert exact.status == ("Failed" if name == "failing" else "Completed"), exact.failure_reason
    a, b = dumps(exact), dumps(ci)
    assert len(a) == (2 if name == "plain" else 4), sorted(a)
    assert compare(a, b) == []
    assert len(dumps(exact, "lightning-")) == (4 if "--lightning" in args else 0)  # every rank's fit
    assert dumps(exact, "lightning-") == dumps(ci, "lightning-")
    deviations = ci.description["Emulator"]["Deviations"]
    added = [d for d in deviations if d not in exact.description["Emulator"]["Deviations"]]
    assert len(added) == 3 and "sleeps capped" in added[0] and "without import torch" in added[1], deviations
    assert "timeline.png" in added[2], deviations
    assert (exact.job_dir / "timeline.png").exists() and not (ci.job_dir / "timeline.png").exists()
    if name in ("pytorchddp", "smdistributed", "mpi"):  # the MPI-family runners' sleep after mpirun
        assert "toolkit sleeps capped" in ci.log("algo-1") and "toolkit sleeps capped" not in exact.log("algo-1")


def test_comparison_finds_a_difference() -> None:
    base = {"env": {"SM_CURRENT_HOST": "algo-1", "TORCHELASTIC_RUN_ID": "x"}, "argv": ["train.py"],
            "proc_environ": ["SM_CURRENT_HOST=algo-1"], "fds": [0, 1, 2], "status": {"NoNewPrivs": "1"}}
    same = {**base, "env": {**base["env"], "TORCHELASTIC_RUN_ID": "y"}, "fds": [0, 1, 2, 5]}
    assert compare({"d": base}, {"d": same}) == []  # listed, or PIDs
    jobid = {**base, "env": {**base["env"], "OMPI_MCA_ess_base_jobid": "2697854977"}}
    other = {**jobid, "env": {**base["env"], "OMPI_MCA_ess_base_jobid": "2697003009"}}
    assert compare({"d": jobid}, {"d": other}) == []
    assert compare({"d": jobid}, {"d": base}) == ["d: env OMPI_MCA_ess_base_jobid: '2697854977' != None"]
    assert compare({"d": base}, {"d": {**base, "argv": ["-u", "train.py"]}}) == [
        "d: argv: ['train.py'] != ['-u', 'train.py']"]
    assert compare({"d": base}, {"d": {**base, "proc_environ": ["SM_CURRENT_HOST=algo-2"]}}) == [
        "d: /proc/self/environ SM_CURRENT_HOST: 'algo-1' != 'algo-2'"]
    assert compare({"d": base}, {"d": {**base, "status": {"NoNewPrivs": "0"}}}) == [
        "d: status: {'NoNewPrivs': '1'} != {'NoNewPrivs': '0'}"]
    assert compare({"d": base}, {"e": base}) == ["different dumps: ['d'] vs ['e']"]
