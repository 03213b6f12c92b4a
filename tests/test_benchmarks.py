"""Benchmarks: the pure helpers, the report's shape and the fast-start argv parser (no timing)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from benchmarks import run, stats
from benchmarks.sampler import Sampler

SITE = Path(__file__).resolve().parent.parent / "emulator" / "inhost" / "site"


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
    assert max(c["ranks"] for c in full if c["group"] == "scale") == 32
    assert all(c["baseline"] is None or c["baseline"] in {x["name"] for x in full} for c in full)
    assert any("pytorchddp" in c["name"] for c in full) and not any("pytorchddp" in c["name"] for c in quick)


def _fake_results() -> dict:
    cases = run.plan_cases(True, 1)
    for i, c in enumerate(cases):
        rep = {"ok": True, "status": "Completed", "wall_s": 10.0 + i, "first_line_s": 2.0, "emulator_cpu_s": 0.2,
               "hosts_cpu_s": 5.0, "sampled_cpu_s": 4.9, "peak_rss_mb": 900.0, "peak_private_mb": 500.0,
               "rank_peak_rss_mb": 300.0, "tail_s": 1.0}
        c["reps"] = [rep]
    cases[-1]["reps"] = [{"ok": False, "status": "unavailable", "error": "boom"}]
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
    assert results["cases"][-1]["status"] == "unavailable"
    for c in results["cases"]:
        assert {"name", "group", "ranks", "hosts", "reps", "median", "status", "ratio_wall"} <= set(c)
    assert set(results["targets"]) and all({"met", "value"} <= set(v) for v in results["targets"].values())
    md = run.render(results)
    assert "| case |" in md and "Targets:" in md and "unavailable" in md
    assert run.plot(results["cases"], tmp_path / "scaling.png") in (True, False)


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


def test_faststart_parses_only_plain_script_and_module_launches() -> None:
    spec = importlib.util.spec_from_file_location("_fs", SITE / "_sm_emulator_faststart.py")
    assert spec and spec.loader
    fs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fs)
    assert fs._parse(["python", "-u", "t.py", "--lr", "1"]) == ("script", "t.py", ["t.py", "--lr", "1"], True)
    assert fs._parse(["python", "-m", "pkg.mod", "x"]) == ("module", "pkg.mod", ["pkg.mod", "x"], False)
    assert fs._parse(["python", "-c", "print(1)"]) is None
    assert fs._parse(["python", "-X", "importtime", "t.py"]) is None
    assert fs._parse(["python"]) is None
