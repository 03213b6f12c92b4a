"""A picture of the job's hosts and ranks over time: ``timeline.json`` and ``timeline.png``.

Rows: one per host (start to exit, with the toolkit's start and its launcher), one per rank
under its host (process start ≈ the first line of user code, process-group init, collectives per
time bin as a strip whose darkness is the count). Vertical lines: faults, the first failure, the
stop. The x axis is seconds since the first host started.

Sources and their clocks (all this machine's wall clock, ``time.time()``):

- the supervisor's events (:class:`~emulator.observers.Event`: status changes, host start and
  exit, first failure, stop, faults);
- host log lines, timestamped when the log tailer reads them (:meth:`Timeline.on_line`; up to
  the tailer's 0.1-s poll late, later when a process buffers its output): the toolkit's first log
  line (``toolkit-start``) and "Invoking script with the following command:" or "Starting MPI run
  as worker node." (``launcher``);
- the ranks' own records in the diagnostics folder: the stacks file header written at
  interpreter start (``rank-start``; the user's script begins right after ``sitecustomize``),
  process-group records (``process-group``) and the collective rings (binned).

``timeline.json`` holds everything the picture shows; ``python -m emulator timeline JOB_DIR``
draws the PNG again from it. Where the PNG is drawn, matplotlib is imported in a background thread
as soon as the hosts have started (about 0.7 of the PNG's 1.1 CPU-seconds here), so the job's end
waits only for the drawing. matplotlib is optional (``pip install 'sagemaker-cluster-emulator[plot]'``):
without it only the JSON is written, and the job's console says so. The ``ci`` profile writes only
the JSON (importing matplotlib and drawing cost about a second of the emulator's CPU per job).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ..inhost.protocol import STACKS_PREFIX
from ..job.request import host_order
from ..observers import AttemptContext, Event, FinishContext, Observer, Report
from .stacks import HEADER

JSON_NAME = "timeline.json"
PNG_NAME = "timeline.png"
#: Collective counts are binned so the picture has at most this many bins per rank.
MAX_BINS = 200
_TOOLKIT = re.compile(r"sagemaker-training-toolkit (INFO|WARNING|ERROR)")
_LAUNCH = re.compile(r"Invoking script with the following command:|Starting MPI run as worker node\.|"
                     r"Starting distributed training through torchrun")
#: Markers drawn as vertical lines across every row, and their colours.
_LINES = {"fault": "tab:purple", "first-failure": "tab:red", "stop": "black", "restart": "tab:orange"}
_MARKS = {"toolkit-start": ("^", "tab:blue"), "launcher": ("s", "tab:green"),
          "rank-start": ("o", "tab:olive"), "process-group": ("D", "tab:cyan")}


def _rank_starts(diag_dir: Path, since: float) -> list[dict[str, Any]]:
    out = []
    for path in diag_dir.glob(f"{STACKS_PREFIX}*.txt"):
        host = path.stem[len(STACKS_PREFIX):].rsplit("-", 1)[0]
        try:
            with open(path, errors="replace") as f:
                first = f.readline()
        except OSError:
            continue
        m = HEADER.match(first)
        if m and m.group(3).isdigit() and m.group(5) and float(m.group(5)) >= since:
            out.append({"Time": float(m.group(5)), "Kind": "rank-start", "Host": host, "Rank": int(m.group(3)),
                        "Detail": f"pid {m.group(1)}"})
    return out


def _process_groups(diag_dir: Path, since: float) -> list[dict[str, Any]]:
    out = []
    for path in diag_dir.glob("*.json"):
        if path.name.startswith(("coll-", "exit-")):
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for g in data.get("process_groups", []) if isinstance(data, dict) else []:
            if "rank" in g and float(g.get("time", 0)) >= since:
                out.append({"Time": float(g["time"]), "Kind": "process-group", "Host": data.get("host"),
                            "Rank": g["rank"], "Detail": f"{g.get('backend_actual')} world {g.get('world_size')}"})
    return out


def _collective_bins(diag_dir: Path, since: float, start: float, end: float) -> dict[str, Any]:
    from .collectives import load

    records, _ = load(diag_dir, since=since)
    span = max(end - start, 1e-3)
    width = max(span / MAX_BINS, 0.05)
    bins = int(span / width) + 1
    series = []
    for r in records:
        counts = [0] * bins
        for call in r.calls:
            i = int((call.issued - start) / width)
            if 0 <= i < bins:
                counts[i] += 1
        series.append({"Rank": r.rank, "Host": r.host, "Total": len(r.calls), "Counts": counts})
    return {"BinSeconds": width, "Series": series}


def build(finish: FinishContext, lines: Sequence[dict[str, Any]], *, since: float, job_name: str) -> dict[str, Any]:
    """The timeline's data (what ``timeline.json`` holds)."""
    events: list[dict[str, Any]] = [{"Time": e.time, "Kind": e.kind, "Host": e.host, "Rank": None, "Detail": e.detail}
                                    for e in finish.events]
    events += [dict(line) for line in lines]
    if finish.diag_dir.is_dir():
        events += _rank_starts(finish.diag_dir, since) + _process_groups(finish.diag_dir, since)
    events.sort(key=lambda e: e["Time"])
    times = [e["Time"] for e in events]
    start = min((e["Time"] for e in events if e["Kind"] == "host-start"), default=min(times, default=since))
    end = max(times, default=start)
    hosts = sorted({h.name for h in finish.hosts} | {e["Host"] for e in events if e["Host"]}, key=host_order)
    ranks = sorted({(e["Host"], e["Rank"]) for e in events if e["Rank"] is not None}, key=lambda hr: hr[1])
    collectives = (_collective_bins(finish.diag_dir, since, start, end) if finish.diag_dir.is_dir()
                   else {"BinSeconds": 0, "Series": []})
    return {"Job": job_name, "Status": finish.status, "SecondaryStatus": finish.secondary_status,
            "Start": start, "End": end, "Hosts": hosts,
            "Ranks": [{"Host": h, "Rank": r} for h, r in ranks], "Events": events, "Collectives": collectives}


#: A job's phases, in the order a job passes them: each ends when the last host (or rank) reaches the
#: event of that kind (the slowest host is what the job waits for).
PHASES = (("hosts up", "host-start"), ("toolkit up", "toolkit-start"), ("launcher", "launcher"),
          ("ranks start", "rank-start"), ("process groups", "process-group"), ("hosts exit", "host-exit"))


def phases(data: dict[str, Any]) -> list[tuple[str, float]]:
    """Where a job's wall time went, from ``timeline.json``'s ``data`` (:func:`build`): for each of
    :data:`PHASES` whose event was recorded, its name and the seconds from the previous phase's end
    (the first one: from the job's first event, its ``Starting`` status) to the last such event. A
    phase with no event (a plain job has no ``launcher`` line; a failed one may have no process
    group) is left out, and the next one counts from the last phase that was there."""
    events = data.get("Events") or []
    if not events:
        return []
    previous = min(float(e["Time"]) for e in events)
    out = []
    for name, kind in PHASES:
        times = [float(e["Time"]) for e in events if e["Kind"] == kind]
        if times:
            out.append((name, round(max(times) - previous, 3)))
            previous = max(times)
    return out


def _import_pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend (no display). Raises ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _warm_pyplot() -> None:
    """:func:`_import_pyplot` for a background thread: a missing or broken matplotlib is for
    :func:`draw` to report at the end, not for this thread."""
    with contextlib.suppress(Exception):  # draw() imports it again and says what is wrong
        _import_pyplot()


def draw(data: dict[str, Any], path: Path) -> Path:
    """Draw ``data`` (see :func:`build`) into a PNG at ``path``. Raises ImportError without matplotlib."""
    plt = _import_pyplot()

    start = float(data["Start"])
    rows: list[tuple[str, str, int | None]] = []  # (label, host, rank)
    for host in data["Hosts"]:
        rows.append((host, host, None))
        rows += [(f"  rank {r['Rank']}", host, r["Rank"]) for r in data["Ranks"] if r["Host"] == host]
    index = {(h, r): i for i, (_, h, r) in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.42 * len(rows)), dpi=80)
    events = data["Events"]
    exits = {e["Host"]: e["Time"] for e in events if e["Kind"] == "host-exit"}
    starts = {e["Host"]: e["Time"] for e in events if e["Kind"] == "host-start"}
    end = float(data["End"])
    for host in data["Hosts"]:
        y = index[(host, None)]
        t0 = starts.get(host, start)
        ax.broken_barh([(t0 - start, exits.get(host, end) - t0)], (y - 0.3, 0.6), color="lightsteelblue")
    for e in events:  # each rank's process, from its start to its host's exit
        if e["Kind"] == "rank-start" and (e["Host"], e["Rank"]) in index:
            lane = index[(e["Host"], e["Rank"])]
            ax.broken_barh([(e["Time"] - start, exits.get(e["Host"], end) - e["Time"])], (lane - 0.2, 0.4),
                           color="gainsboro")
    width = float(data["Collectives"].get("BinSeconds") or 0)
    peak = max((max(s["Counts"], default=0) for s in data["Collectives"]["Series"]), default=0)
    for s in data["Collectives"]["Series"]:
        row = index.get((s["Host"], s["Rank"]))
        if row is None or not peak:
            continue
        bars = [(i * width, width) for i, c in enumerate(s["Counts"]) if c]
        shades = [plt.cm.Greens(0.3 + 0.7 * c / peak) for c in s["Counts"] if c]
        ax.broken_barh(bars, (row - 0.25, 0.5), facecolors=shades)
    seen: set[str] = set()
    for e in events:
        x = e["Time"] - start
        if e["Kind"] in _LINES:
            ax.axvline(x, color=_LINES[e["Kind"]], linestyle="--", linewidth=1,
                       label=e["Kind"] if e["Kind"] not in seen else None)
            seen.add(e["Kind"])
        elif e["Kind"] in _MARKS:
            at = index.get((e["Host"], e["Rank"])) if e["Rank"] is not None else index.get((e["Host"], None))
            if at is None:
                continue
            marker, colour = _MARKS[e["Kind"]]
            ax.plot([x], [at], marker=marker, color=colour, linestyle="none",
                    label=e["Kind"] if e["Kind"] not in seen else None)
            seen.add(e["Kind"])
    if peak:
        ax.plot([], [], marker="s", color=plt.cm.Greens(0.8), linestyle="none",
                label=f"collectives (per {width:.2g} s, max {peak})")
    ax.set_yticks(range(len(rows)), [label for label, _, _ in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("seconds since the first host started")
    ax.set_title(f"{data['Job']}: {data['Status']} ({data['SecondaryStatus']})")
    ax.grid(axis="x", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def redraw(job_dir: Path) -> Path:
    """Draw ``JOB_DIR/timeline.png`` again from ``JOB_DIR/timeline.json``."""
    source = job_dir / JSON_NAME
    if not source.is_file():
        raise FileNotFoundError(f"{source} does not exist: JOB_DIR must be a job's folder (it holds job.json and "
                                f"{JSON_NAME}, written by jobs run since the timeline was added)")
    return draw(json.loads(source.read_text()), job_dir / PNG_NAME)


class Timeline(Observer):
    """Collects the timeline's log-line events while the job runs; writes the JSON and (``png``,
    the default; the ``ci`` profile leaves it to ``python -m emulator timeline``) the PNG at the end."""

    def __init__(self, job_name: str, *, png: bool = True) -> None:
        self.job_name = job_name
        self.png = png
        self.lines: list[dict[str, Any]] = []
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self.since = 0.0
        #: Imports matplotlib while the hosts run (module docstring), so the job's end waits only
        #: for the drawing; None: not started (no PNG, or no attempt yet).
        self.warming: threading.Thread | None = None

    def on_start(self, ctx: AttemptContext) -> None:
        with self._lock:
            self._seen.clear()  # a restarted attempt logs its toolkit start again
        if ctx.attempt == 0:
            self.since = ctx.records_since
            if self.png and self.warming is None:
                self.warming = threading.Thread(target=_warm_pyplot, name="timeline-import", daemon=True)
                self.warming.start()

    def on_line(self, host: str, line: str) -> None:
        kind = "toolkit-start" if _TOOLKIT.search(line) else "launcher" if _LAUNCH.search(line) else None
        if kind is None:
            return
        with self._lock:
            if (host, kind) in self._seen:
                return
            self._seen.add((host, kind))
            self.lines.append({"Time": time.time(), "Kind": kind, "Host": host, "Rank": None,
                               "Detail": line.strip()[-120:]})

    def report(self, finish: FinishContext) -> Report:
        data = build(finish, self.lines, since=self.since, job_name=self.job_name)
        (finish.job_dir / JSON_NAME).write_text(json.dumps(data, indent=1) + "\n")
        files = {"Json": str(finish.job_dir / JSON_NAME)}
        console = []
        if not self.png:
            console.append(f"timeline: {files['Json']} (draw it: python -m emulator timeline {finish.job_dir})")
            return Report(emulator={"Timeline": files}, console=console)
        try:
            files["Png"] = str(draw(data, finish.job_dir / PNG_NAME))
            console.append(f"timeline: {files['Png']}")
        except ImportError:
            console.append(f"timeline: {files['Json']} (matplotlib is not installed, so no PNG: "
                           "pip install 'sagemaker-cluster-emulator[plot]', then python -m emulator timeline "
                           f"{finish.job_dir})")
        return Report(emulator={"Timeline": files}, console=console)


__all__ = ["PHASES", "Event", "Timeline", "build", "draw", "phases", "redraw"]
