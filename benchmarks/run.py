"""Run every benchmark case side by side and write ``results.json``, ``results.md``, ``scaling.png``.

``python -m benchmarks.run [--quick] [--reps N] [--out DIR]``. Each measured job runs in a fresh
worker process (:mod:`benchmarks.worker`) while :class:`benchmarks.sampler.Sampler` samples the
worker's whole process tree (memory, CPU) from here. Repetitions of a group are interleaved
(baseline, emulator, variants, then again), so a change in the machine's load hits every case
alike. A failing case is reported with its error and the run goes on; the exit status is 1 when
any case or docker job failed or any target was missed (the docker part is ``unavailable``, not a
failure, when no engine or image is there; ``--no-docker`` skips it).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from emulator.diagnostics.timeline import PHASES

from . import worker
from .sampler import Sampler
from .stats import fmt, markdown_table, median, ratio, summarise

#: Longest any single measured job may take before it is killed and reported as failed.
JOB_TIMEOUT = 900.0
METRICS = ("wall_s", "first_line_s", "tail_s", "emulator_cpu_s", "hosts_cpu_s", "sampled_cpu_s",
           "peak_rss_mb", "peak_private_mb", "rank_peak_rss_mb")
TORCH_DIST = {"torch_distributed": {"enabled": True}}
PYTORCHDDP = {"pytorchddp": {"enabled": True}}
ROOT = Path(__file__).resolve().parent.parent
#: Fast start forks only where the str hash seed is fixed (emulator/inhost/site/_sm_emulator_faststart.py).
FAST_ENV = {"PYTHONHASHSEED": "0"}
#: Hosts (2 ranks each) of the scale cases: up to 64 ranks.
SCALE_HOSTS = (1, 2, 4, 8, 16, 32)
#: The issue's ratio targets: (label, case, at most this many times the hand-rolled torchrun launch).
RATIO_TARGETS = (("ci 2x2 torch_distributed", "allreduce: emulator torch_distributed, ci profile", 1.0),
                 ("ci 2x2 pytorchddp", "allreduce: emulator pytorchddp (mpirun), ci profile", 1.5),
                 ("ci Lightning DDP fit 2x2", "lightning: emulator torch_distributed, ci profile", 1.0),
                 ("exact 2x2 torch_distributed", "allreduce: emulator torch_distributed", 1.2))


def loadavg() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages."""
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def measure(spec: dict[str, Any], *, timeout: float = JOB_TIMEOUT) -> dict[str, Any]:
    """Run one job in a worker process, sampling its process tree; return the worker's figures."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        result_path = Path(f.name)
    load = loadavg()[0]
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.worker", json.dumps(spec), str(result_path)],
                            cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    with Sampler(proc.pid, rank_marker=spec["script"]) as sampler:
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
    try:
        res: dict[str, Any] = json.loads(result_path.read_text() or "{}")
    except (OSError, ValueError):
        res = {}
    result_path.unlink(missing_ok=True)
    if not res:
        res = {"ok": False, "status": "error", "error": f"worker exit {proc.returncode}: {(stderr or '')[-1500:]}"}
    res.update(sampler.result())
    res["load1"] = load
    return split_cpu(spec, res)


def split_cpu(spec: dict[str, Any], res: dict[str, Any]) -> dict[str, Any]:
    """``emulator_cpu_s`` (the emulator process plus its helper programs) and ``hosts_cpu_s``
    (everything else the job ran) from the worker's rusage figures and the sampler's helpers."""
    helpers = (res.get("helpers_cpu_s") or 0.0) if spec["kind"] == "emulator" else 0.0
    if res.get("emulator_self_cpu_s") is not None:
        res["emulator_cpu_s"] = round(res["emulator_self_cpu_s"] + helpers, 3)
    if res.get("children_cpu_s") is not None:
        res["hosts_cpu_s"] = round(res["children_cpu_s"] - helpers, 2)
    return res


def case(name: str, group: str, spec: dict[str, Any], reps: int, *, baseline: str | None = None,
         ranks: int = 4, hosts: int = 2) -> dict[str, Any]:
    return {"name": name, "group": group, "spec": spec, "want_reps": reps, "baseline": baseline,
            "ranks": ranks, "hosts": hosts, "reps": []}


def emu(script: str, hosts: int, *, distribution: dict[str, Any] | None = None, gpus: int | None = 2,
        backend: str = "process", env: dict[str, str] | None = None, profile: str = "exact") -> dict[str, Any]:
    return {"kind": "emulator", "script": script, "hosts": hosts, "gpus": gpus, "distribution": distribution,
            "backend": backend, "env": env or {}, "profile": profile}


def plan_cases(quick: bool, reps: int | None) -> list[dict[str, Any]]:
    """The cases, grouped; groups run their repetitions interleaved."""
    r2 = reps or (1 if quick else 3)
    rl = reps or (1 if quick else 2)
    rddp = 1 if quick or reps is None else reps
    cases = [
        case("allreduce: torchrun by hand (baseline)", "allreduce", {"kind": "torchrun", "script": "allreduce.py",
             "nproc": 4}, r2, ranks=4, hosts=1),
        case("allreduce: emulator torch_distributed", "allreduce", emu("allreduce.py", 2, distribution=TORCH_DIST),
             r2, baseline="allreduce: torchrun by hand (baseline)"),
        case("allreduce: emulator torch_distributed, ci profile", "allreduce",
             emu("allreduce.py", 2, distribution=TORCH_DIST, profile="ci"), r2,
             baseline="allreduce: torchrun by hand (baseline)"),
        case("allreduce: emulator torch_distributed + fast start", "allreduce",
             emu("allreduce.py", 2, distribution=TORCH_DIST, backend="fast", env=FAST_ENV), r2,
             baseline="allreduce: torchrun by hand (baseline)"),
        case("toolkit only: 1 host, trivial script", "toolkit", emu("trivial.py", 1, gpus=None), r2,
             ranks=1, hosts=1),
    ]
    if not quick:
        cases.insert(2, case("allreduce: emulator pytorchddp (mpirun)", "allreduce",
                             emu("allreduce.py", 2, distribution=PYTORCHDDP), rddp,
                             baseline="allreduce: torchrun by hand (baseline)"))
        cases.insert(3, case("allreduce: emulator pytorchddp (mpirun), ci profile", "allreduce",
                             emu("allreduce.py", 2, distribution=PYTORCHDDP, profile="ci"), r2,
                             baseline="allreduce: torchrun by hand (baseline)"))
        lit_env = {"EMULATOR_FAST_START_PRELOAD": "torch,torch.distributed,pytorch_lightning", **FAST_ENV}
        cases += [
            case("lightning: torchrun by hand (baseline)", "lightning", {"kind": "torchrun",
                 "script": "lightning_fit.py", "nproc": 4}, rl, ranks=4, hosts=1),
            case("lightning: emulator torch_distributed", "lightning",
                 emu("lightning_fit.py", 2, distribution=TORCH_DIST), rl,
                 baseline="lightning: torchrun by hand (baseline)"),
            case("lightning: emulator torch_distributed, ci profile", "lightning",
                 emu("lightning_fit.py", 2, distribution=TORCH_DIST, profile="ci"), rl,
                 baseline="lightning: torchrun by hand (baseline)"),
            case("lightning: emulator pytorchddp (mpirun)", "lightning",
                 emu("lightning_fit.py", 2, distribution=PYTORCHDDP), rddp,
                 baseline="lightning: torchrun by hand (baseline)"),
            case("lightning: emulator torch_distributed + fast start", "lightning",
                 emu("lightning_fit.py", 2, distribution=TORCH_DIST, backend="fast", env=lit_env), rl,
                 baseline="lightning: torchrun by hand (baseline)"),
            # FSDP2 on a CPU mesh: the same script both ways (FSDP v1 needs an accelerator by hand)
            case("fsdp: torchrun by hand (baseline)", "fsdp", {"kind": "torchrun", "script": "fsdp_fit.py",
                 "nproc": 4}, rl, ranks=4, hosts=1),
            case("fsdp: emulator torch_distributed, ci profile", "fsdp",
                 emu("fsdp_fit.py", 2, distribution=TORCH_DIST, profile="ci"), rl,
                 baseline="fsdp: torchrun by hand (baseline)"),
        ]
    for n in (1, 2) if quick else SCALE_HOSTS:
        cases.append(case(f"scale: {n} host(s) x 2 ranks, ci profile", "scale",
                          emu("allreduce.py", n, distribution=TORCH_DIST, profile="ci"), 1, ranks=2 * n, hosts=n))
        if n in ((2,) if quick else (4, 16)):
            cases.append(case(f"scale: {n} host(s) x 2 ranks + fast start", "scale-fast",
                              emu("allreduce.py", n, distribution=TORCH_DIST, backend="fast", env=FAST_ENV),
                              1, ranks=2 * n, hosts=n, baseline=f"scale: {n} host(s) x 2 ranks, ci profile"))
    return cases


def run_cases(cases: list[dict[str, Any]], log: Any) -> None:
    """Run the cases, interleaving the repetitions within each group."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in cases:
        groups.setdefault(c["group"], []).append(c)
    for members in groups.values():
        for rep in range(max(c["want_reps"] for c in members)):
            for c in members:
                if rep >= c["want_reps"]:
                    continue
                t = time.time()
                res = measure(c["spec"])
                c["reps"].append(res)
                log(f"  {c['name']} [rep {rep + 1}/{c['want_reps']}]: {res.get('status')} "
                    f"wall {fmt(res.get('wall_s'), 's')} first line {fmt(res.get('first_line_s'), 's')} "
                    f"emulator cpu {fmt(res.get('emulator_cpu_s'), 's', 3)} (took {time.time() - t:.0f} s, "
                    f"load {res.get('load1')})")
    by_name = {c["name"]: c for c in cases}
    for c in cases:
        ok = [r for r in c["reps"] if r.get("ok")]
        c["status"] = "ok" if ok and len(ok) == len(c["reps"]) else "failed"
        c["median"] = summarise(ok, METRICS) if ok else {}
        c["phases"] = {name: median([r["phases"][name] for r in ok if name in r.get("phases", {})])
                       for name, _ in PHASES if any(name in r.get("phases", {}) for r in ok)}
        c["errors"] = [r["error"] for r in c["reps"] if r.get("error")][:1]
        base = by_name.get(c["baseline"] or "")
        c["ratio_wall"] = ratio(c["median"].get("wall_s"), base["median"].get("wall_s")) if base and base.get(
            "median") else None


def mpi_sleeps() -> dict[str, Any]:
    """The fixed ``time.sleep`` calls of the toolkit's MPI-family runners (from its source)."""
    out: dict[str, Any] = {}
    for mod in ("sagemaker_training.mpi", "sagemaker_training.smdataparallel"):
        spec = importlib.util.find_spec(mod)
        if spec is None or spec.origin is None:
            continue
        text = Path(spec.origin).read_text()
        out[mod] = [{"line": i, "seconds": float(m.group(1))} for i, line in enumerate(text.splitlines(), 1)
                    if not line.lstrip().startswith("#") and (m := re.search(r"time\.sleep\((\d+(?:\.\d+)?)\)", line))
                    and float(m.group(1)) >= 10]
    return out


def import_cache_probe(reps: int) -> dict[str, Any]:
    """CPU seconds of ``import torch`` in a fresh interpreter: as hosts run it
    (``PYTHONDONTWRITEBYTECODE=1``) and with a warm shared ``PYTHONPYCACHEPREFIX``."""
    prefix = Path(tempfile.mkdtemp(prefix="sm-bench-pycache-"))
    code = "import resource, torch; r = resource.getrusage(resource.RUSAGE_SELF); print(r.ru_utime + r.ru_stime)"

    def one(env: dict[str, str]) -> float:
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
                             text=True, check=True).stdout
        return float(out.split()[-1])

    try:
        one({"PYTHONPYCACHEPREFIX": str(prefix)})  # warm the shared cache
        res = {"dontwritebytecode_cpu_s": median([one({"PYTHONDONTWRITEBYTECODE": "1"}) for _ in range(reps)]),
               "shared_pycache_prefix_cpu_s": median([one({"PYTHONPYCACHEPREFIX": str(prefix)})
                                                      for _ in range(reps)])}
    finally:
        shutil.rmtree(prefix, ignore_errors=True)
    return res


def docker_bench(quick: bool, log: Any) -> dict[str, Any]:
    """Image build (cached) and a 2x2 job on the docker backend, when the backend and image exist."""
    from emulator.backends.docker.backend import DockerBackend

    try:
        DockerBackend().check()
    except Exception as exc:
        return {"status": "unavailable", "error": f"{type(exc).__name__}: {exc}"}
    out: dict[str, Any] = {"status": "ok", "image_build_cold_s": None,
                           "image_build_cold_note": "not measured: a cold build re-runs debootstrap and pip "
                                                    "(minutes); run `nox -s image` on an idle machine"}
    t = time.time()
    built = subprocess.run([sys.executable, "docker/build.py"], cwd=ROOT, capture_output=True, text=True,
                           check=False, timeout=JOB_TIMEOUT)
    out["image_build_cached_s"] = round(time.time() - t, 2) if built.returncode == 0 else None
    if built.returncode != 0:
        out["image_build_error"] = (built.stderr or built.stdout)[-800:]
    if quick:
        return out
    for name, spec in (("trivial 1 host", emu("trivial.py", 1, gpus=None, backend="docker")),
                       ("allreduce 2x2 torch_distributed", emu("allreduce.py", 2, distribution=TORCH_DIST,
                                                               backend="docker"))):
        res = measure(spec)
        out[name] = res
        log(f"  docker {name}: {res.get('status')} wall {fmt(res.get('wall_s'), 's')}")
    return out


def plot(cases: Sequence[dict[str, Any]], path: Path) -> bool:
    """Wall time and peak memory against ranks for the scale cases (PNG, Agg backend)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(14, 4))
    for group, label, marker in (("scale", "torch_distributed, ci profile", "o-"),
                                 ("scale-fast", "+ fast start", "s--")):
        pts = sorted((x["ranks"], x["median"]) for x in cases if x["group"] == group and x["median"])
        if not pts:
            continue
        xs = [p[0] for p in pts]
        a.plot(xs, [p[1]["wall_s"] for p in pts], marker, label=label)
        b.plot(xs, [(p[1]["peak_private_mb"] or 0) / 1024 for p in pts], marker, label=label)
        c.plot(xs, [(m["peak_private_mb"] or 0) / ranks for ranks, m in pts], marker,
               label=f"{label}: job peak / ranks")
        c.plot(xs, [p[1].get("rank_peak_rss_mb") or 0 for p in pts], marker[0] + ":",
               label=f"{label}: one rank's peak RSS")
    a.set(xlabel="ranks (2 per host)", ylabel="wall time to job end (s)", title="Job wall time")
    b.set(xlabel="ranks (2 per host)", ylabel="peak memory, private estimate (GiB)", title="Peak memory")
    c.set(xlabel="ranks (2 per host)", ylabel="MB", title="Memory per rank")
    for ax in (a, b, c):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def render(results: dict[str, Any]) -> str:
    """The Markdown report."""
    meta = results["meta"]
    rows = []
    for c in results["cases"]:
        m = c["median"]
        rows.append([c["name"], f"{c['ranks']}", c["status"] + ("" if c["status"] == "ok" else
                                                                 f" ({(c['errors'] or [''])[0][:60]!r})"),
                     f"{len(c['reps'])}", fmt(m.get("wall_s"), "s"),
                     fmt(c["ratio_wall"], "×") if c["ratio_wall"] else "", fmt(m.get("first_line_s"), "s"),
                     fmt(m.get("emulator_cpu_s"), "s", 3),
                     f"{fmt(m.get('hosts_cpu_s'), 's', 1)} / {fmt(m.get('sampled_cpu_s'), 's', 1)}",
                     fmt(m.get("peak_private_mb"), "MB", 0), fmt(m.get("rank_peak_rss_mb"), "MB", 0)])
    text = [f"# Benchmark results ({meta['started']})", "",
            f"Machine: {meta['machine']}; load average before {meta['load_before']}, after "
            f"{meta['load_after']}; run took {meta['duration_s']:.0f} s. Medians over the repetitions.", "",
            markdown_table(["case", "ranks", "status", "reps", "wall", "× baseline", "first line (all hosts)",
                            "emulator CPU (incl. helpers)", "hosts CPU (rusage / sampled)", "peak mem (private est.)",
                            "peak RSS / rank"], rows), ""]
    timed = [c for c in results["cases"] if c.get("phases") and c["group"] in ("allreduce", "toolkit")]
    if timed:
        names = [name for name, _ in PHASES if any(name in c["phases"] for c in timed)]
        text += ["Where the smallest jobs' time goes: each phase ends at the last host's (or rank's) event of its "
                 "kind in the job's timeline.json (medians):", "",
                 markdown_table(["case", *names], [[c["name"], *(fmt(c["phases"].get(n), "s") for n in names)]
                                                   for c in timed]), ""]
    tk = results.get("toolkit_share")
    if tk:
        text.append("Toolkit + platform share per host (1 host, trivial script): "
                    f"{fmt(tk.get('hosts_cpu_s'), 's', 2)} CPU, {fmt(tk.get('wall_s'), 's')} wall, "
                    f"first user line after {fmt(tk.get('first_line_s'), 's')}.")
    sleeps = results.get("mpi_sleeps") or {}
    flat = [f"{s['seconds']:g} s ({mod.rsplit('.', 1)[-1]}.py:{s['line']})" for mod, lst in sleeps.items() for s in lst]
    ddp = [c for c in results["cases"] if "pytorchddp" in c["name"] and c["median"]]
    text.append(f"MPI-family runners' fixed toolkit sleeps: {', '.join(flat) or 'none found'}; measured tail after "
                f"the last rank finished (pytorchddp): "
                + (", ".join(f"{fmt(c['median'].get('tail_s'), 's')}" for c in ddp) or "—") + ".")
    ic = results.get("import_cache")
    if ic:
        text.append(f"`import torch` CPU: {fmt(ic.get('dontwritebytecode_cpu_s'), 's')} as hosts run it, "
                    f"{fmt(ic.get('shared_pycache_prefix_cpu_s'), 's')} with a warm shared PYTHONPYCACHEPREFIX.")
    dk = results.get("docker") or {}
    if dk.get("status") != "ok":
        text.append(f"Docker backend: {dk.get('status')} ({dk.get('error', '')[:200]}).")
    else:
        parts = [f"cached image build {fmt(dk.get('image_build_cached_s'), 's')}",
                 f"cold build: {dk.get('image_build_cold_note')}"]
        for k in ("trivial 1 host", "allreduce 2x2 torch_distributed"):
            if k in dk:
                parts.append(f"{k}: {dk[k].get('status')} wall {fmt(dk[k].get('wall_s'), 's')}, first line "
                             f"{fmt(dk[k].get('first_line_s'), 's')}")
        text.append("Docker backend: " + "; ".join(parts) + ".")
    text += ["", "Targets: " + "; ".join(f"{k}: {'met' if v['met'] else 'NOT met'} ({v['value']})"
                                         for k, v in results["targets"].items())]
    return "\n".join(text) + "\n"


def targets(cases: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets (ratios to the hand-rolled torchrun launch of the same script, same run)."""
    by = {c["name"]: c for c in cases}

    def ratio_at_most(name: str, limit: float) -> dict[str, Any]:
        value = by[name].get("ratio_wall")
        return {"met": bool(value and value <= limit), "value": fmt(value, "×") if value else "no ratio"}

    cpu = [c["median"].get("emulator_cpu_s") for c in cases if c["spec"].get("kind") == "emulator" and c["median"]]
    big = [c for c in cases if c["group"] == "scale" and c["ranks"] == max(
        (x["ranks"] for x in cases if x["group"] == "scale"), default=0)]
    ratios = {f"{label} <= {limit:g}x hand torchrun": ratio_at_most(name, limit)
              for label, name, limit in RATIO_TARGETS if name in by}  # --quick runs fewer cases
    return {
        **ratios,
        "emulator's own CPU <= 0.5 s per job": {
            "met": bool(cpu) and max(v for v in cpu if v is not None) <= 0.5,
            "value": f"max {fmt(max((v for v in cpu if v is not None), default=None), 's', 3)} over cases"},
        f"{big[0]['ranks'] if big else '?'} ranks complete": {
            "met": bool(big) and big[0]["status"] == "ok", "value": big[0]["status"] if big else "not run"},
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (~2 minutes on an idle machine)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions of the 2x2 cases")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results")
    ap.add_argument("--no-docker", action="store_true")
    ap.add_argument("--render", action="store_true",
                    help="only redraw results.md and scaling.png from OUT/results.json (no job runs)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.render:
        saved = json.loads((args.out / "results.json").read_text())
        saved["plot"] = plot(saved["cases"], args.out / "scaling.png")
        (args.out / "results.md").write_text(render(saved))
        print(render(saved))
        return 1 if failures(saved) else 0

    def log(msg: str) -> None:
        print(msg, flush=True)

    gib = round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30)
    started, t0, load_before = time.strftime("%Y-%m-%d %H:%M:%S"), time.time(), loadavg()
    log(f"benchmarks: load average {load_before}")
    cases = plan_cases(args.quick, args.reps)
    run_cases(cases, log)
    results: dict[str, Any] = {
        "meta": {"started": started, "quick": args.quick, "machine": f"{platform.platform()}, "
                 f"{os.cpu_count()} CPUs, {gib} GiB",
                 "python": sys.version.split()[0], "load_before": load_before},
        "cases": cases,
        "toolkit_share": next((c["median"] for c in cases if c["group"] == "toolkit"), None),
        "mpi_sleeps": mpi_sleeps(),
        "import_cache": None if args.quick else import_cache_probe(3),
        "docker": {"status": "skipped"} if args.no_docker else docker_bench(args.quick, log),
        "method": {"worker": inspect.getdoc(worker), "sampler": inspect.getdoc(sys.modules[Sampler.__module__])},
    }
    results["targets"] = targets(cases)
    results["meta"].update(load_after=loadavg(), duration_s=round(time.time() - t0, 1))
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    results["plot"] = plot(cases, args.out / "scaling.png")
    md = render(results)
    (args.out / "results.md").write_text(md)
    print("\n" + md)
    problems = failures(results)
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


def failures(results: dict[str, Any]) -> list[str]:
    """Why the run fails: failed cases, failed docker jobs or image build, missed targets."""
    out = [f"case {c['name']!r}: {c['status']} ({(c['errors'] or ['no error recorded'])[0][:300]})"
           for c in results["cases"] if c["status"] != "ok"]
    dk = results.get("docker") or {}
    if dk.get("image_build_error"):
        out.append(f"docker image build: {dk['image_build_error'][-300:]}")
    for name, res in dk.items():
        if isinstance(res, dict) and not res.get("ok", True):
            out.append(f"docker {name}: {res.get('status')} ({(res.get('error') or '')[:300]})")
    out += [f"target {name!r} missed ({t['value']})" for name, t in results["targets"].items() if not t["met"]]
    return out


if __name__ == "__main__":
    raise SystemExit(main())
