"""The first death is the headline: a 2-host x 2-GPU ``torch_distributed`` job where one rank dies
first and the others fail after it names that rank, above the secondary errors.

Oracles: the script's own text (the line of the statement that dies, its function), torchrun's own
"Root Cause (first observed failure)" block in the dying rank's host log (rank, local rank,
exit code ``-11`` for SIGSEGV), and the hosts' exit statuses; ``FailureReason`` is compared with
the toolkit's failure files, which the emulator does not write. One job per case, ``ci`` profile.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from sm_emulator_fixtures.jobs import report_sections

from emulator import supervisor
from emulator.job.profiles import CI
from emulator.job.request import create
from emulator.job.result import FAILURE_REASON_LIMIT, JobResult

SCRIPTS = Path(__file__).parents[1] / "scripts"
SCRIPT = (SCRIPTS / "first_death.py").read_text()
TORCH_DIST = {"torch_distributed": {"enabled": True}}


def line(marker: str) -> int:
    return next(i for i, text in enumerate(SCRIPT.splitlines(), 1) if marker in text)


def run(tmp_path: Path, name: str, hyperparameters: dict[str, Any], backend: str = "process") -> tuple[JobResult, str]:
    """Run first_death.py on 2 hosts x 2 GPUs; returns the result and the console the job printed."""
    stream = io.StringIO()
    request = create(output_path=tmp_path, job_name=name, entry_point="first_death.py", source_dir=SCRIPTS,
                     instance_count=2, instance_type="ml.p4d.24xlarge", gpus_per_host=2, distribution=TORCH_DIST,
                     hyperparameters=hyperparameters, max_run=600, profile=CI)
    return supervisor.run(request, backend=backend, stream=stream, stop_grace=2), stream.getvalue()


def summary_of(console: str, result: JobResult) -> str:
    """The summary the job printed at its end (after the hosts' echoed lines): from its status line."""
    start = console.rindex(f"{result.job_name}: {result.status}")
    return re.sub(r"\x1b\[[\d;]*m", "", console[start:])


def check_failure_reason_is_the_toolkits(result: JobResult) -> None:
    """FailureReason is what SageMaker reports: the first failing host's failure file, as the toolkit wrote it."""
    files = {h.name: h.failure for h in result.hosts if h.failure}
    assert files, [h.how for h in result.hosts]
    expected = files.get(result.first_failure or "") or next(iter(files.values()))
    assert result.failure_reason == ("AlgorithmError: " + expected.strip())[:FAILURE_REASON_LIMIT]
    assert "first death" not in result.failure_reason


def check_secondary(first: dict[str, Any]) -> None:
    """Every later death is after the first, and none of them is the first rank."""
    for later in first["Secondary"]:
        assert later["AfterSeconds"] > 0 and later["Time"] > first["Time"]
        assert (later["Host"], later["Rank"]) != (first["Host"], first["Rank"])


def check_segfault(result: JobResult, console: str) -> None:
    assert result.status == "Failed"
    first = result.first_death
    assert first is not None, result.description["Emulator"]
    where = f"first_death.py:{line('FIRST-DEATH-SEGFAULT')} in crash"
    assert (first["Host"], first["Rank"], first["LocalRank"], first["Signal"], first["ExitCode"]) == \
        ("algo-1", 0, 0, "SIGSEGV", -11)
    assert first["Source"] == "faulthandler" and first["Where"] == where
    assert first["Stack"][0].endswith(" in string_at") and where in first["Stack"]
    assert f"first_death.py:{line('# CALLS-CRASH')} in main" in first["Stack"]
    check_secondary(first)
    # torchrun's own word on algo-1 (its log) agrees: rank 0, local rank 0, exit code -11
    log1 = result.log("algo-1")
    block = log1[log1.index("Root Cause (first observed failure):"):]
    assert re.search(r"rank\s+: 0 \(local_rank: 0\)\n.*exitcode\s+: -11 \(pid: (\d+)\)", block)
    assert {"Host": "algo-1", "Rank": 0, "LocalRank": 0, "ExitCode": -11, "Signal": "SIGSEGV"}.items() <= \
        next(r for r in first["RootCauses"] if r["Host"] == "algo-1").items()
    assert first["Pid"] == int(re.search(r"exitcode\s+: -11 \(pid: (\d+)\)", block).group(1))  # type: ignore[union-attr]
    assert all(h.exit_code for h in result.hosts if h.exit is not None)  # every host that ended, failed
    check_failure_reason_is_the_toolkits(result)
    # faulthandler's dump went to the emulator's file, not to what the job printed (the emulator's
    # own stacks-at-stop section, appended to the host logs, has a format of its own)
    for host in ("algo-1", "algo-2"):
        log = result.log(host)
        assert "Fatal Python error" not in log and "Current thread 0x" not in log
        assert 'first_death.py", line ' + str(line("FIRST-DEATH-SEGFAULT")) not in log
    dump = Path(first["DumpFile"]).read_text()
    assert "Fatal Python error: Segmentation fault" in dump and 'first_death.py", line' in dump
    # the console: the headline right below the status line, above the host that exited first
    summary = summary_of(console, result)
    headline = first["Headline"]
    assert headline.startswith("first death: algo-1 rank 0 (local rank 0, pid ")
    assert " died of SIGSEGV (exit code -11) at " in headline and f", in {where}" in headline
    assert summary.splitlines()[1] == headline
    assert f"    {where}\n" in summary
    if "first failure: " in summary:
        assert summary.index(headline) < summary.index("first failure: ") < summary.index("FailureReason: ")
    # the pytest plugin's report: the first death is the first section, above the log tails
    (title, text), *tails = report_sections([result])
    assert title == f"{result.job_name} first death" and text.splitlines()[0] == headline and where in text
    assert [t for t, _ in tails] == [f"{result.job_name} algo-1 log tail", f"{result.job_name} algo-2 log tail"]


def test_rank0_segfault_is_the_headline(tmp_path: Path) -> None:
    """Global rank 0 (algo-1) segfaults after one all_reduce; the others wait in the next one and fail after it."""
    check_segfault(*run(tmp_path, "first-death-segv", {"rank": 0, "how": "segfault"}))


def test_rank2_exception_is_the_headline(tmp_path: Path) -> None:
    """Global rank 2 (algo-2) raises first; the other ranks fail after it."""
    result, console = run(tmp_path, "first-death-raise", {"rank": 2, "how": "raise"})
    assert result.status == "Failed"
    first = result.first_death
    assert first is not None, result.description["Emulator"]
    where = f"first_death.py:{line('FIRST-DEATH-RAISE')} in give_up"
    assert (first["Host"], first["Rank"], first["LocalRank"], first["ExitCode"], first["Signal"]) == \
        ("algo-2", 2, 0, 1, None)
    assert (first["Exception"], first["Message"]) == ("RuntimeError", "rank 2 gives up on purpose")
    assert first["Source"] == "exception" and first["Where"] == where and first["Stack"][0] == where
    check_secondary(first)
    log2 = result.log("algo-2")
    assert "RuntimeError: rank 2 gives up on purpose" in log2  # the job's own traceback, as on SageMaker
    block = log2[log2.index("Root Cause (first observed failure):"):]
    assert re.search(r"rank\s+: 2 \(local_rank: 0\)\n.*exitcode\s+: 1 \(pid: \d+\)", block)
    check_failure_reason_is_the_toolkits(result)
    summary = summary_of(console, result)
    assert summary.splitlines()[1] == first["Headline"]
    assert first["Headline"].startswith("first death: algo-2 rank 2 (local rank 0, pid ")
    assert "died of an uncaught RuntimeError: rank 2 gives up on purpose (exit code 1)" in first["Headline"]


@pytest.mark.docker
def test_rank0_segfault_is_the_headline_on_docker(tmp_path: Path, docker_ready: None) -> None:
    check_segfault(*run(tmp_path, "first-death-segv-docker", {"rank": 0, "how": "segfault"}, backend="docker"))
