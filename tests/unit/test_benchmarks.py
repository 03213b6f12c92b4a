"""Benchmarks: the pure helpers, the report's shape and the fast-start argv parser (no timing)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from benchmarks import run, stats
from benchmarks.sampler import Sampler

SITE = Path(__file__).resolve().parents[2] / "emulator" / "inhost" / "site"


def test_median_ignores_missing_values() -> None:
    assert stats.median([3.0, None, 1.0, 2.0]) == 2.0
    assert stats.median([None]) is None
    assert stats.summarise([{"a": 1.0}, {"a": 3.0, "b": 5.0}], ["a", "b"]) == {"a": 2.0, "b": 5.0}


def test_ratio_and_format() -> None:
    assert stats.ratio(5.0, 4.0) == 1.25
    assert stats.ratio(None, 4.0) is None and stats.ratio(1.0, 0.0) is None
    assert stats.fmt(1.2345, "s") == "1.23 s" and stats.fmt(None) == "—"


def test_markdown_table() -> None:
    md = stats.markdown_table(["a", "b"], [["1", "2"]])
    assert md.splitlines() == ["| a | b |", "|---|---|", "| 1 | 2 |"]


def test_plan_quick_and_full() -> None:
    quick = run.plan_cases(True, None)
    full = run.plan_cases(False, None)
    assert {c["group"] for c in quick} >= {"allreduce", "toolkit", "scale"}
    assert max(c["ranks"] for c in full if c["group"] == "scale") == 64
    assert all(c["baseline"] is None or c["baseline"] in {x["name"] for x in full} for c in full)
    assert any("pytorchddp" in c["name"] for c in full) and not any("pytorchddp" in c["name"] for c in quick)
    fsdp = {c["name"]: c for c in full if c["group"] == "fsdp"}  # FSDP against torchrun by hand
    assert {c["spec"]["script"] for c in fsdp.values()} == {"fsdp_fit.py"}
    assert fsdp["fsdp: emulator torch_distributed, ci profile"]["baseline"] == "fsdp: torchrun by hand (baseline)"


def _fake_results() -> dict:
    cases = run.plan_cases(True, 1)
    for i, c in enumerate(cases):
        rep = {"ok": True, "status": "Completed", "wall_s": 10.0 - 0.1 * i, "first_line_s": 2.0, "emulator_cpu_s": 0.2,
               "hosts_cpu_s": 5.0, "sampled_cpu_s": 4.9, "peak_rss_mb": 900.0, "peak_private_mb": 500.0,
               "rank_peak_rss_mb": 300.0, "tail_s": 1.0}
        if c["spec"]["kind"] == "emulator":  # what the worker reads off the job's timeline.json
            rep["phases"] = {"hosts up": 0.2, "toolkit up": 0.5 + i, "ranks start": 4.0, "hosts exit": 2.0}
        c["reps"] = [rep]
    cases[-1]["reps"] = [{"ok": False, "status": "error", "error": "boom"}]
    # the post-processing part of run_cases, without running anything
    for c in cases:
        c["want_reps"] = 0
    run.run_cases(cases, lambda _m: None)
    return {"meta": {"started": "now", "machine": "test", "load_before": [0, 0, 0], "load_after": [0, 0, 0],
                     "duration_s": 1.0}, "cases": cases, "toolkit_share": None, "mpi_sleeps": run.mpi_sleeps(),
            "import_cache": None, "docker": {"status": "unavailable", "error": "no engine"},
            "targets": run.targets(cases)}


def test_results_schema_and_markdown(tmp_path: Path) -> None:
    results = _fake_results()
    base = next(c for c in results["cases"] if c["name"].startswith("allreduce: torchrun"))
    td = next(c for c in results["cases"] if c["name"] == "allreduce: emulator torch_distributed")
    assert base["status"] == "ok" and td["ratio_wall"] == td["median"]["wall_s"] / base["median"]["wall_s"]
    assert results["cases"][-1]["status"] == "failed"
    for c in results["cases"]:
        assert {"name", "group", "ranks", "hosts", "reps", "median", "status", "ratio_wall"} <= set(c)
    assert set(results["targets"]) and all({"met", "value"} <= set(v) for v in results["targets"].values())
    md = run.render(results)
    assert "| case |" in md and "Targets:" in md and "failed ('boom')" in md
    assert td["phases"] == {"hosts up": 0.2, "toolkit up": 1.5, "ranks start": 4.0, "hosts exit": 2.0}
    table = md[md.index("Where the smallest jobs' time goes"):].splitlines()
    assert table[2].split("|")[1:-1] == [" case ", " hosts up ", " toolkit up ", " ranks start ", " hosts exit "]
    assert "| allreduce: emulator torch_distributed | 0.20 s | 1.50 s | 4.00 s | 2.00 s |" in md
    assert "allreduce: torchrun by hand" not in "\n".join(table[:8])  # no timeline by hand


def test_plot_writes_a_png_when_matplotlib_is_there(tmp_path: Path) -> None:
    """``plot`` draws with matplotlib (installed by ``nox -s bench``) and says False without it."""
    path = tmp_path / "scaling.png"
    drawn = run.plot(_fake_results()["cases"], path)
    if importlib.util.find_spec("matplotlib") is None:
        assert drawn is False and not path.exists()
    else:
        assert drawn is True and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_failed_case_or_a_missed_target_fails_the_run() -> None:
    """``nox -s bench`` exits 1 (``main`` returns what ``failures`` finds) for each of these."""
    results = _fake_results()
    last = results["cases"][-1]["name"]
    assert run.failures(results) == [f"case {last!r}: failed (boom)"]  # every target is met here
    results["cases"][-1]["status"] = "ok"
    assert run.failures(results) == []
    results["cases"][1]["median"]["emulator_cpu_s"] = 0.7
    results["targets"] = run.targets(results["cases"])
    assert run.failures(results) == ["target \"emulator's own CPU <= 0.5 s per job\" missed (max 0.700 s over cases)"]
    results["cases"][1]["median"]["emulator_cpu_s"] = 0.2
    slow = next(c for c in results["cases"] if c["name"] == "allreduce: emulator torch_distributed, ci profile")
    slow["ratio_wall"] = 1.01
    results["targets"] = run.targets(results["cases"])
    assert run.failures(results) == ["target 'ci 2x2 torch_distributed <= 1x hand torchrun' missed (1.01 ×)"]
    results["targets"] = {}
    results["docker"] = {"status": "ok", "image_build_cached_s": 1.0,
                         "trivial 1 host": {"ok": False, "status": "Failed", "error": "no"}}
    assert run.failures(results) == ["docker trivial 1 host: Failed (no)"]


def test_emulator_cpu_includes_its_helpers() -> None:
    res = run.split_cpu({"kind": "emulator"}, {"emulator_self_cpu_s": 0.2, "children_cpu_s": 10.0,
                                               "helpers_cpu_s": 0.15})
    assert res["emulator_cpu_s"] == 0.35 and res["hosts_cpu_s"] == 9.85
    base = run.split_cpu({"kind": "torchrun"}, {"emulator_self_cpu_s": 0.0, "children_cpu_s": 8.0,
                                                "helpers_cpu_s": 0.0})
    assert base["emulator_cpu_s"] == 0.0 and base["hosts_cpu_s"] == 8.0


def test_mpi_sleeps_found_in_the_toolkit_source() -> None:
    found = run.mpi_sleeps()
    assert any(s["seconds"] == 30 for lst in found.values() for s in lst)


def test_sampler_sees_its_own_children(tmp_path: Path) -> None:
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    s = Sampler(os.getpid(), rank_marker="time.sleep")
    s.sample()
    proc.wait()
    res = s.result()
    assert res["samples"] == 1 and res["max_procs"] >= 1 and res["rank_peak_rss_mb"] > 0


#: A stand-in for the namespace agent (its file is named ``nsagent.py``): on ``short`` it runs a
#: child to its end, on ``long`` it starts one and reaps it on ``reap``; each child burns a fixed
#: amount of CPU. It answers with its children's CPU as the kernel accounts it.
FAKE_AGENT = """\
import resource, subprocess, sys
BURN = "import sys, time\\nwhile time.process_time() < float(sys.argv[1]): pass\\n"
long = None
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "short":
        subprocess.run([sys.executable, "-c", BURN, cmd[1]], check=True)
    elif cmd[0] == "long":
        long = subprocess.Popen([sys.executable, "-c", BURN + "sys.stdin.read()", cmd[1]], stdin=subprocess.PIPE)
        print(long.pid, flush=True)
        continue
    elif cmd[0] == "reap":
        long.stdin.close()
        long.wait()
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(r.ru_utime + r.ru_stime, flush=True)
"""


def test_sampler_counts_a_helpers_short_lived_children_but_not_its_hosts(tmp_path: Path) -> None:
    """A child the agent started and reaped between two samples (``ip``) is the emulator's CPU; a
    child seen running (a host) is not, although the kernel folds both into the agent's figures."""
    import subprocess

    script = tmp_path / "nsagent.py"
    script.write_text(FAKE_AGENT)
    agent = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    assert agent.stdin and agent.stdout

    def ask(line: str) -> str:
        agent.stdin.write(line + "\n")  # type: ignore[union-attr]
        agent.stdin.flush()  # type: ignore[union-attr]
        return agent.stdout.readline().strip()  # type: ignore[union-attr]

    s = Sampler(os.getpid())
    try:
        s.sample()
        short = float(ask("short 0.3"))  # lives and dies between two samples
        s.sample()
        assert int(ask("long 0.5")) > 0
        s.sample()  # the "host" is seen running ...
        both = float(ask("reap"))  # ... then burns its CPU and is reaped by the agent
        s.sample()
        agent_own = s._cpu[next(k for k in s._cpu if k[0] == agent.pid)]
    finally:
        agent.stdin.close()
        agent.wait()
    assert short >= 0.3 and both - short >= 0.5
    helpers = s.result()["helpers_cpu_s"]
    assert abs(helpers - (agent_own + short)) < 0.03, (helpers, agent_own, short, both)


def test_faststart_parses_only_plain_script_and_module_launches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(SITE))  # as in a host: the in-host site folder is on sys.path
    spec = importlib.util.spec_from_file_location("_fs", SITE / "_sm_emulator_faststart.py")
    assert spec and spec.loader
    fs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fs)
    assert fs._parse(["python", "-u", "t.py", "--lr", "1"]) == ("script", "t.py", ["t.py", "--lr", "1"], True)
    assert fs._parse(["python", "-m", "pkg.mod", "x"]) == ("module", "pkg.mod", ["pkg.mod", "x"], False)
    assert fs._parse(["python", "-c", "print(1)"]) is None
    assert fs._parse(["python", "-X", "importtime", "t.py"]) is None
    assert fs._parse(["python"]) is None
