"""The supervisor's policies against a fake backend and a fake clock: milliseconds per test.

Expected statuses and messages come from DescribeTrainingJob's documented states (AWS API
reference: TrainingJobStatus InProgress|Completed|Failed|Stopping|Stopped; SecondaryStatus
Starting|Downloading|Training|Uploading|Stopping|Stopped|MaxRuntimeExceeded|Interrupted|Completed|
Failed) and SageMaker's stop semantics (SIGTERM, 120 s, SIGKILL: "Stop a training job",
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_StopTrainingJob.html). End-to-end
versions of these run in test_jobs.py and test_fault_jobs.py with real hosts.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from emulator.diagnostics.faults import Kill, Spot, Trigger
from emulator.inhost.protocol import HostExit
from emulator.job import request as rq
from emulator.observers import AttemptContext, Event, FinishContext, Observer, Report, StopReason
from emulator.supervisor import FAIL_FAST_GRACE, Outcome, decide, run

from ..fakes import FakeBackend, FakeClock, HostScript

GRACE = 120.0


class Recorder(Observer):
    """Records the hooks the supervisor calls, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.stop_reasons: list[StopReason] = []

    def on_start(self, ctx: AttemptContext) -> None:
        self.calls.append(f"start:{ctx.attempt}")

    def before_stop(self, reason: StopReason) -> Sequence[Event]:
        self.calls.append("before_stop")
        self.stop_reasons.append(reason)
        return ()

    def on_end(self, now: float) -> Sequence[Event]:
        self.calls.append("end")
        return ()

    def report(self, finish: FinishContext) -> Report:
        self.calls.append(f"report:{finish.status}")
        return Report(console=["recorded"])


@pytest.fixture
def job(tmp_path: Path) -> rq.JobRequest:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    return rq.create(entry_point="train.py", source_dir=src, instance_count=2, instance_type="ml.g5.12xlarge",
                     gpus_per_host=2, distribution={"torch_distributed": {"enabled": True}},
                     output_path=tmp_path / "out", job_name="fake-job", max_run=60)


def _run(job: rq.JobRequest, backend: FakeBackend, **kwargs: object) -> tuple:
    recorder = Recorder()
    result = run(job, backend=backend, echo=False, stop_grace=GRACE, clock=backend.clock,
                 observers=[recorder], **kwargs)  # type: ignore[arg-type]
    return result, recorder


def _statuses(result: object) -> list[str]:
    return [t["Status"] for t in result.description["SecondaryStatusTransitions"]]  # type: ignore[attr-defined]


def test_decide_is_the_whole_policy() -> None:
    ok, bad = HostExit(0), HostExit(1)
    common = dict(now=0.0, deadline=10.0, stop_requested=False, restart_requested=False)
    assert decide({}, 2, **common) is None
    assert decide({"algo-1": ok}, 2, **common) is None
    assert decide({"algo-1": ok, "algo-2": ok}, 2, **common) is Outcome.COMPLETED
    assert decide({"algo-2": bad}, 2, **common) is Outcome.FAILED
    # a failure wins over every request; a restart over a stop; a stop over the deadline
    assert decide({"algo-2": bad}, 2, now=11.0, deadline=10.0, stop_requested=True,
                  restart_requested=True) is Outcome.FAILED
    assert decide({}, 2, now=11.0, deadline=10.0, stop_requested=True, restart_requested=True) is Outcome.INTERRUPTED
    assert decide({}, 2, now=11.0, deadline=10.0, stop_requested=True, restart_requested=False) is Outcome.STOPPED
    assert decide({}, 2, now=10.0, deadline=10.0, stop_requested=False,
                  restart_requested=False) is Outcome.MAX_RUNTIME


def test_completed_when_every_host_exits_zero(job: rq.JobRequest) -> None:
    backend = FakeBackend(FakeClock(), [{"algo-1": HostScript(0.5), "algo-2": HostScript(0.3)}])
    result, rec = _run(job, backend)
    assert (result.status, result.secondary_status) == ("Completed", "Completed")
    assert _statuses(result) == ["Starting", "Downloading", "Training", "Uploading", "Completed"]
    assert [h.exit_code for h in result.hosts] == [0, 0]
    assert rec.calls == ["start:0", "end", "report:Completed"]  # no before_stop: nothing was stopped
    assert backend.jobs[0].teardowns == [FAIL_FAST_GRACE]  # the final (idempotent) teardown only
    assert "FailureReason" not in result.description
    saved = json.loads((job.job_dir / "job.json").read_text())
    assert saved["TrainingJobStatus"] == "Completed" and saved["Emulator"]["Backend"] == "fake"


def test_fail_fast_stops_the_others_and_names_the_first_failure(job: rq.JobRequest) -> None:
    backend = FakeBackend(FakeClock(), [{"algo-2": HostScript(0.2, status=3)}])
    result, rec = _run(job, backend)
    assert (result.status, result.secondary_status) == ("Failed", "Failed")
    assert result.first_failure == "algo-2"
    assert result.failure_reason == "AlgorithmError: Exit Code: 3"  # no failure file: the exit status
    hosts = {h.name: h for h in result.hosts}
    assert hosts["algo-2"].how == "exit 3"
    assert hosts["algo-1"].how == "signal SIGKILL" and hosts["algo-1"].exit_code == 137
    assert rec.stop_reasons == [StopReason.FAIL_FAST]
    assert backend.jobs[0].teardowns[0] == FAIL_FAST_GRACE  # peers are not given SageMaker's 120 s
    first = result.description["Emulator"]["FirstFailure"]
    assert first["Host"] == "algo-2" and first["ExitCode"] == 3 and first["Signal"] is None


def test_an_exit_status_of_137_is_not_a_signal(job: rq.JobRequest) -> None:
    """A script calling sys.exit(137) is reported as exit 137; only a signal the emulator sent is
    reported as a signal."""
    backend = FakeBackend(FakeClock(), [{"algo-2": HostScript(0.2, status=137)}])
    result, _ = _run(job, backend)
    algo2 = next(h for h in result.hosts if h.name == "algo-2")
    assert (algo2.exit_code, algo2.signal, algo2.how) == (137, None, "exit 137")
    assert result.description["Emulator"]["Hosts"][1]["Signal"] is None
    assert result.failure_reason == "AlgorithmError: Exit Code: 137"


def test_max_runtime_stops_with_sagemakers_grace(job: rq.JobRequest) -> None:
    backend = FakeBackend(FakeClock())  # hosts never exit, and ignore SIGTERM like the toolkit
    result, rec = _run(job, backend)
    assert (result.status, result.secondary_status) == ("Stopped", "MaxRuntimeExceeded")
    assert _statuses(result) == ["Starting", "Downloading", "Training", "Stopping", "Uploading",
                                 "MaxRuntimeExceeded"]
    assert backend.jobs[0].teardowns[0] == GRACE
    assert backend.clock.now >= job.max_runtime_seconds + GRACE
    assert rec.stop_reasons == [StopReason.MAX_RUNTIME]
    assert [h.name for h in result.hosts] == ["algo-1", "algo-2"]
    assert all(h.signal == signal.SIGKILL for h in result.hosts)
    assert "FailureReason" not in result.description
    transitions = result.description["SecondaryStatusTransitions"]
    assert "StatusMessage" not in transitions[-1]  # SageMaker's text is unknown: none invented


def test_a_host_that_obeys_sigterm_ends_within_the_grace(job: rq.JobRequest) -> None:
    scripts = {h: HostScript(obeys_sigterm=True) for h in ("algo-1", "algo-2")}
    backend = FakeBackend(FakeClock(), [scripts])
    result, _ = _run(job, backend)
    assert result.secondary_status == "MaxRuntimeExceeded"
    assert [h.name for h in result.hosts] == ["algo-1", "algo-2"]
    assert all(h.signal == signal.SIGTERM and h.exit_code == 143 for h in result.hosts)
    assert backend.clock.now < job.max_runtime_seconds + 1  # no grace was waited for


def test_stop_request_stops_the_job(job: rq.JobRequest) -> None:
    stop = threading.Event()

    class StopAt(Observer):
        def on_tick(self, now: float) -> Sequence[Event]:
            if now >= 1.0:
                stop.set()
            return ()

    backend = FakeBackend(FakeClock())
    rec = Recorder()
    result = run(job, backend=backend, echo=False, stop_grace=GRACE, clock=backend.clock, stop=stop,
                 observers=[StopAt(), rec])
    assert (result.status, result.secondary_status) == ("Stopped", "Stopped")
    assert rec.stop_reasons == [StopReason.STOP_REQUEST]
    assert 1.0 <= backend.clock.now < 2.0 + GRACE


def test_spot_restart_carries_pending_faults_into_the_new_attempt(job: rq.JobRequest) -> None:
    """spot@1s, then kill:algo-2:SIGKILL@5s: the kill has not fired when the spot interruption ends
    the first attempt, fires in the second, and the job fails with exit 137."""
    clock = FakeClock()
    backend = FakeBackend(clock)
    rec = Recorder()
    job = dataclasses.replace(job, max_runtime_seconds=3600)  # the spot stop waits SageMaker's 120 s
    result = run(job, backend=backend, echo=False, stop_grace=GRACE, clock=clock, observers=[rec],
                 faults=[Spot(Trigger(1.0)), Kill("algo-2", signal.SIGKILL, Trigger(5.0))])
    assert len(backend.jobs) == 2
    assert rec.calls[:2] == ["start:0", "before_stop"] and "start:1" in rec.calls
    assert rec.stop_reasons[0] is StopReason.SPOT
    assert (result.status, result.secondary_status) == ("Failed", "Failed")
    assert result.first_failure == "algo-2"
    assert result.failure_reason == "AlgorithmError: Exit Code: 137"
    assert signal.SIGKILL in backend.jobs[1].hosts["algo-2"].signals
    assert not any(sig == signal.SIGKILL for sig in backend.jobs[0].hosts["algo-2"].signals[:1])
    faults = result.description["Emulator"]["Faults"]
    assert [f["Kind"] for f in faults] == ["spot", "kill"]
    assert result.description["Emulator"]["SpotInterruptions"] == 1
    statuses = _statuses(result)
    assert statuses.count("Starting") == 2 and "Interrupted" in statuses


def test_billable_time_equals_training_time_without_spot(job: rq.JobRequest) -> None:
    backend = FakeBackend(FakeClock(), [{"algo-1": HostScript(30.0), "algo-2": HostScript(30.0)}])
    result, _ = _run(job, backend)
    d = result.description
    assert d["BillableTimeInSeconds"] == d["TrainingTimeInSeconds"] >= 30


def test_ctrl_c_stops_hosts_writes_job_json_and_reraises(job: rq.JobRequest) -> None:
    class Interrupt(Observer):
        def on_tick(self, now: float) -> Sequence[Event]:
            if now >= 0.5:
                raise KeyboardInterrupt
            return ()

    backend = FakeBackend(FakeClock())
    rec = Recorder()
    with pytest.raises(KeyboardInterrupt):
        run(job, backend=backend, echo=False, stop_grace=GRACE, clock=backend.clock, observers=[Interrupt(), rec])
    saved = json.loads((job.job_dir / "job.json").read_text())
    assert (saved["TrainingJobStatus"], saved["SecondaryStatus"]) == ("Stopped", "Stopped")
    assert rec.stop_reasons == [StopReason.INTERRUPT]
    assert backend.jobs[0].teardowns[0] == FAIL_FAST_GRACE
    assert {h["How"] for h in saved["Emulator"]["Hosts"]} == {"signal SIGKILL"}


def test_an_observer_that_raises_does_not_break_the_job(job: rq.JobRequest) -> None:
    class Broken(Observer):
        def on_tick(self, now: float) -> Sequence[Event]:
            raise RuntimeError("boom")

        def report(self, finish: FinishContext) -> Report:
            raise ValueError("bad report")

    backend = FakeBackend(FakeClock(), [{"algo-1": HostScript(0.2), "algo-2": HostScript(0.2)}])
    result = run(job, backend=backend, echo=False, clock=backend.clock, observers=[Broken()])
    assert result.status == "Completed"
    kinds = [d.kind for d in result.diagnostics]
    assert "observer-error" in kinds
    assert any("bad report" in d.message for d in result.diagnostics)


def test_the_launch_spec_that_ran_is_written(job: rq.JobRequest) -> None:
    backend = FakeBackend(FakeClock(), [{"algo-1": HostScript(0.1), "algo-2": HostScript(0.1)}])
    result, _ = _run(job, backend)
    spec = json.loads((job.job_dir / "launch-spec.json").read_text())
    assert [h["name"] for h in spec["hosts"]] == ["algo-1", "algo-2"]
    assert [h["address"] for h in spec["hosts"]] == ["10.0.0.2", "10.0.0.3"]
    assert spec["hosts"][1]["environment"]["TRAINING_JOB_NAME"] == "fake-job"
    assert result.description["Emulator"]["LaunchSpec"].endswith("launch-spec.json")


HOOKS = ("on_start", "on_line", "on_tick", "restart_requested", "failure_requested", "deviations", "before_stop",
         "on_end", "report")


@pytest.mark.parametrize("hook", HOOKS)
def test_an_observer_raising_in_any_hook_is_recorded_and_does_not_break_the_job(job: rq.JobRequest,
                                                                                 hook: str) -> None:
    """One error policy for every hook: the job ends as it would have without the observer, and
    the exception is an ``observer-error`` diagnostic (once, though the hook is called every poll)."""

    class Raises(Observer):
        pass

    def boom(*_args: object) -> None:
        raise RuntimeError(f"boom in {hook}")

    setattr(Raises, hook, boom)
    # algo-2 fails: hosts are stopped (before_stop runs) and the job fails as without the observer
    backend = FakeBackend(FakeClock(), [{"algo-1": HostScript(30.0), "algo-2": HostScript(0.5, status=3)}],
                          lines={"algo-1": ["a line"]})
    result, recorder = _run_with(job, backend, Raises())
    assert (result.status, result.secondary_status) == ("Failed", "Failed")
    assert result.first_failure == "algo-2"
    errors = [d.message for d in result.diagnostics if d.kind == "observer-error"]
    assert errors == [f"Raises.{hook}: RuntimeError('boom in {hook}')"]
    assert recorder.calls == ["start:0", "before_stop", "end", "report:Failed"]  # the others still ran
    assert json.loads((job.job_dir / "job.json").read_text())["Emulator"]["Diagnostics"][-1]["Kind"] == "observer-error"


def _run_with(job: rq.JobRequest, backend: FakeBackend, *observers: Observer) -> tuple:
    recorder = Recorder()
    result = run(job, backend=backend, echo=False, stop_grace=GRACE, clock=backend.clock,
                 observers=[*observers, recorder])
    return result, recorder
