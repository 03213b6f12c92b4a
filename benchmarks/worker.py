"""One measured job, in its own process: ``python -m benchmarks.worker SPEC_JSON RESULT_JSON``.

Kinds of spec:

* ``emulator``: ``emulator.run(...)`` on ``backend`` (``process``, ``docker``, or ``fast`` — the
  process backend with ``fast_start=True``). ``RUSAGE_SELF`` around
  the call is the emulator's own CPU (supervisor thread, log tailer, agent reader, archives,
  ``job.json``); ``RUSAGE_CHILDREN`` is every host's CPU: the chain rank → torchrun → toolkit
  (host PID 1) → ``bwrap`` → namespace agent → ``unshare`` → this process is waited for link by
  link, so the kernel folds each host's whole tree into it.
* ``torchrun``: the baseline, ``torchrun --nnodes 1 --nproc_per_node N`` on localhost.

The workload prints ``BENCH_FIRST_LINE <time>`` as its first line; the time from the call to the
last host's first line is the start-up latency.
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


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _marks(text: str, tag: str) -> list[tuple[float, str]]:
    out = []
    for line in text.splitlines():
        at = line.find(tag + " ")  # mpirun prefixes lines with [1,mpirank:N,algo-M]<stdout>:
        if at >= 0:
            parts = line[at:].split()
            try:
                out.append((float(parts[1]), parts[2] if len(parts) > 2 else ""))
            except (ValueError, IndexError):
                continue
    return out


def _timing(texts: dict[str, str], t0: float, t_end: float) -> dict[str, Any]:
    """Start-up latency (to the last host's first user line) and the tail after the last rank."""
    firsts = {h: min(t for t, _ in m) for h, text in texts.items() if (m := _marks(text, "BENCH_FIRST_LINE"))}
    dones = [t for text in texts.values() for t, _ in _marks(text, "BENCH_DONE")]
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
    env = {**os.environ, **spec.get("env", {})}
    c0, t0 = _cpu(resource.RUSAGE_CHILDREN), time.time()
    with open(log, "wb") as out:
        rc = subprocess.run([str(torchrun), "--nnodes", "1", "--nproc_per_node", str(spec["nproc"]),
                             "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), str(script)],
                            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work, check=False).returncode
    t1 = time.time()
    text = log.read_text(errors="replace")
    return {"ok": rc == 0, "status": "Completed" if rc == 0 else f"exit {rc}", "wall_s": round(t1 - t0, 3),
            "hosts_cpu_s": round(_cpu(resource.RUSAGE_CHILDREN) - c0, 2), "emulator_cpu_s": 0.0,
            **_timing({"localhost": text}, t0, t1), "error": None if rc == 0 else text[-2000:]}


def run_emulator(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    import emulator

    src = work / "src"
    src.mkdir()
    shutil.copy(WORKLOADS / spec["script"], src / spec["script"])
    backend: Any = spec.get("backend", "process")
    fast = backend == "fast"
    if fast:
        backend = "process"
    kwargs = dict(entry_point=spec["script"], source_dir=str(src), instance_count=spec["hosts"],
                  instance_type=spec.get("instance_type", "ml.p4d.24xlarge"),
                  output_path=str(work / "out"), environment=dict(spec.get("env", {})), fast_start=fast)
    if spec.get("gpus") is not None:
        kwargs["gpus_per_host"] = spec["gpus"]
    if spec.get("distribution"):
        kwargs["distribution"] = spec["distribution"]
    s0, c0, t0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.time()
    result = emulator.run(backend=backend, echo=False, stop_grace=2, **kwargs)
    t1 = time.time()
    s1, c1 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    texts = {h.name: h.log.read_text(errors="replace") if h.log.exists() else "" for h in result.hosts}
    transitions = result.description.get("SecondaryStatusTransitions", [])
    error = None
    if not result.ok:
        first = result.first_failure or (result.hosts[0].name if result.hosts else None)
        error = f"{result.status}: {result.failure_reason or ''}\n" + (result.log_tail(first, 15) if first else "")
    return {"ok": result.ok, "status": result.status, "wall_s": round(t1 - t0, 3),
            "emulator_cpu_s": round(s1 - s0, 3), "hosts_cpu_s": round(c1 - c0, 2),
            "runner": result.description.get("Emulator", {}).get("Runner"),
            "transitions": [t["Status"] for t in transitions],
            **_timing(texts, t0, t1), "error": error}


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
