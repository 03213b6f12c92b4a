"""One measured job, in its own process: ``python -m benchmarks.worker SPEC_JSON RESULT_JSON``.

Kinds of spec:

* ``emulator``: ``emulator.run(...)`` on ``backend`` (``process``, ``docker``, or ``fast`` — the
  process backend with ``fast_start=True``), in ``profile`` (``exact``, the default, or ``ci``).
  ``RUSAGE_SELF`` around the call is the emulator
  process's own CPU (supervisor thread, log tailer, agent reader, archives, ``job.json``);
  ``RUSAGE_CHILDREN`` is everything it started: the chain rank → torchrun → toolkit (host PID 1)
  → ``bwrap`` → namespace agent → ``unshare`` → this process is waited for link by link, so the
  kernel folds each host's whole tree into it. :mod:`benchmarks.run` moves the emulator's helper
  programs (agent, ``unshare``, ``bwrap``, ``ip``, ``nsenter``; measured by
  :class:`benchmarks.sampler.Sampler`) from the second figure to the first.
* ``torchrun``: the baseline, ``torchrun --nnodes 1 --nproc_per_node N`` on localhost.

Every rank of a workload writes its marks (``first``: its first statement ran; ``done``: it
finished) into a small JSON file: under ``SM_OUTPUT_DATA_DIR`` on the emulator (so they come back
in ``output.tar.gz``), under ``BENCH_MARKS_DIR`` for the baseline. The time from the call to the
last host's first mark is the start-up latency; from the last ``done`` to the job's end, the tail.
(Marks are files, not log lines: ``mpirun --tag-output`` may split a rank's line.) An emulator job
also reports its timeline's phases (:func:`emulator.diagnostics.timeline.phases`: hosts up, toolkit
up, launcher, ranks start, process groups, hosts exit).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORKLOADS = Path(__file__).resolve().parent / "workloads"
#: The workloads' helper that writes their marks (copied next to each one).
MARKS = "marks.py"


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _marks(files: dict[str, bytes]) -> list[dict[str, Any]]:
    """The marks the ranks wrote (``bench-marks/*.json``, see the module docstring)."""
    out = []
    for name, data in files.items():
        if name.split("/")[-2:-1] == ["bench-marks"] and name.endswith(".json"):
            out.append(json.loads(data))
    return out


def _timing(marks: list[dict[str, Any]], t0: float, t_end: float) -> dict[str, Any]:
    """Start-up latency (to the last host's first rank) and the tail after the last rank ended."""
    firsts: dict[str, float] = {}
    for m in marks:
        if m["mark"] == "first":
            firsts[m["host"]] = min(firsts.get(m["host"], m["time"]), m["time"])
    dones = [m["time"] for m in marks if m["mark"] == "done"]
    return {"first_line_s": round(max(firsts.values()) - t0, 3) if firsts else None,
            "first_line_per_host_s": {h: round(t - t0, 3) for h, t in sorted(firsts.items())},
            "tail_s": round(t_end - max(dones), 3) if dones else None,
            "ranks_done": len(dones)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_torchrun(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    script = WORKLOADS / spec["script"]
    torchrun = Path(sys.executable).parent / "torchrun"
    log = work / "torchrun.log"
    env = {**os.environ, **spec.get("env", {}), "BENCH_MARKS_DIR": str(work)}
    c0, t0 = _cpu(resource.RUSAGE_CHILDREN), time.time()
    with open(log, "wb") as out:
        rc = subprocess.run([str(torchrun), "--nnodes", "1", "--nproc_per_node", str(spec["nproc"]),
                             "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), str(script)],
                            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work, check=False).returncode
    t1 = time.time()
    text = log.read_text(errors="replace")
    files = {str(p.relative_to(work)): p.read_bytes() for p in work.glob("bench-marks/*.json")}
    return {"ok": rc == 0, "status": "Completed" if rc == 0 else f"exit {rc}", "wall_s": round(t1 - t0, 3),
            "children_cpu_s": round(_cpu(resource.RUSAGE_CHILDREN) - c0, 2), "emulator_self_cpu_s": 0.0,
            **_timing(_marks(files), t0, t1),
            "error": None if rc == 0 else text[-2000:]}


def run_emulator(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    import emulator
    from emulator.diagnostics.timeline import JSON_NAME, phases

    src = work / "src"
    src.mkdir()
    for name in (spec["script"], MARKS):
        shutil.copy(WORKLOADS / name, src / name)
    # What the workload needs beyond the DLC (e.g. Lightning), as its job's requirements.txt.
    requirements = WORKLOADS / f"{Path(spec['script']).stem}.requirements.txt"
    if requirements.is_file():
        shutil.copy(requirements, src / "requirements.txt")
    backend: Any = spec.get("backend", "process")
    fast = backend == "fast"
    if fast:
        backend = "process"
    kwargs = dict(entry_point=spec["script"], source_dir=str(src), instance_count=spec["hosts"],
                  instance_type=spec.get("instance_type", "ml.p4d.24xlarge"),
                  output_path=str(work / "out"), environment=dict(spec.get("env", {})), fast_start=fast,
                  profile=spec.get("profile", "exact"))
    if spec.get("gpus") is not None:
        kwargs["gpus_per_host"] = spec["gpus"]
    if spec.get("distribution"):
        kwargs["distribution"] = spec["distribution"]
    s0, c0, t0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.time()
    result = emulator.run(backend=backend, echo=False, stop_grace=2, **kwargs)
    t1 = time.time()
    s1, c1 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    transitions = result.description.get("SecondaryStatusTransitions", [])
    error = None
    if not result.ok:
        first = result.first_failure or (result.hosts[0].name if result.hosts else None)
        error = f"{result.status}: {result.failure_reason or ''}\n" + (result.log_tail(first, 15) if first else "")
    timeline = result.job_dir / JSON_NAME
    job_phases = phases(json.loads(timeline.read_text())) if timeline.is_file() else []
    return {"ok": result.ok, "status": result.status, "wall_s": round(t1 - t0, 3),
            "emulator_self_cpu_s": round(s1 - s0, 3), "children_cpu_s": round(c1 - c0, 3),
            "phases": {name: seconds for name, seconds in job_phases},
            "runner": result.description.get("Emulator", {}).get("Runner"),
            "transitions": [t["Status"] for t in transitions],
            **_timing(_marks(result.output_files()), t0, t1), "error": error}


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    work = Path(tempfile.mkdtemp(prefix="sm-bench-"))
    try:
        try:
            res = run_torchrun(spec, work) if spec["kind"] == "torchrun" else run_emulator(spec, work)
        except Exception as exc:  # reported, never fatal for the whole benchmark
            res = {"ok": False, "status": "error", "error": f"{type(exc).__name__}: {exc}"}
    finally:
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    Path(argv[1]).write_text(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
