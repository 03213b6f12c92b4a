"""The job's metric definitions, applied to its hosts' logs as they are written.

Every host's log line (as the host wrote it: MPI ranks' tags intact, the emulator's own lines
left out) is searched with each ``MetricDefinition`` the moment the log tailer reads it (see
:mod:`emulator.job.metrics` for what is and is not as SageMaker does it). At the end:

* ``FinalMetricDataList`` in ``job.json`` (DescribeTrainingJob's field: the last value of each
  metric that had one);
* ``metrics.json`` in the job folder: every data point with its host and time (what SageMaker
  sends to CloudWatch Metrics; the SDK session answers ``training_job_analytics`` from it);
* ``Emulator.Metrics``: per definition, how many lines matched and how many values it yielded;
  for a definition that yielded none, the log line nearest to its regex (a typo is found before a
  paid run or a tuning job that "has no objective metric"), and the first matched text that was
  not a number. The console summary lists each metric's final value and names each definition
  that yielded nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..console import host_output, table
from ..job.metrics import MetricDefinition, Scraper, nearest_line
from ..job.result import iso
from ..observers import FinishContext, Observer, Report

#: Written in the job folder: every data point.
METRICS_FILE = "metrics.json"
#: At most this many lines of each host's log are searched for a definition's nearest line.
NEAREST_SCAN = 50_000


class MetricsObserver(Observer):
    """Reads the metric definitions' values from the host logs (see the module docstring)."""

    def __init__(self, definitions: Sequence[MetricDefinition]) -> None:
        self.scraper = Scraper(definitions)

    def on_line(self, host: str, line: str) -> None:
        self.scraper.feed(host, line, time.time())

    def report(self, finish: FinishContext) -> Report:
        s = self.scraper
        final = s.final()
        (finish.job_dir / METRICS_FILE).write_text(json.dumps(
            {"MetricDefinitions": [d.to_dict() for d in s.definitions],
             "Points": [{**p.to_dict(), "Timestamp": iso(p.time)} for p in s.all_points()]}, indent=1) + "\n")
        unmatched = []
        missing = s.unmatched()
        lines = list(_lines({h.name: host_output(h.log) for h in finish.hosts})) if missing else []  # read once
        for d in missing:
            near = nearest_line(d.regex, lines)
            unmatched.append({"MetricName": d.name, "Regex": d.regex, "LinesMatched": s.matches[d.name],
                              "NotANumber": s.not_numbers.get(d.name),
                              "NearestLine": {"Host": near[0], "Line": near[1]} if near else None})
        report = Report(description={"FinalMetricDataList": [
            {"MetricName": p.name, "Value": p.value, "Timestamp": iso(p.time)} for p in final]})
        report.emulator["Metrics"] = {
            "File": str(finish.job_dir / METRICS_FILE),
            "Definitions": [{"MetricName": d.name, "LinesMatched": s.matches[d.name],
                             "Values": len(s.points[d.name])} for d in s.definitions],
            "Unmatched": unmatched}
        if final:
            rows = [(p.name, f"{p.value:g}", p.host, str(len(s.points[p.name]))) for p in final]
            report.console += ["", *table(["metric", "final value", "host", "values"], rows).splitlines()]
        for u in unmatched:
            report.warnings.append(_unmatched_text(u))
        return report


def _lines(logs: dict[str, Path]) -> Iterator[tuple[str, str]]:
    for host, path in logs.items():
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for i, line in enumerate(f):
                    if i >= NEAREST_SCAN:
                        break
                    yield host, line.rstrip("\n")
        except OSError:
            continue


def _unmatched_text(u: dict[str, Any]) -> str:
    text = f"metric {u['MetricName']!r}: regex {u['Regex']!r} yielded no value"
    if u["LinesMatched"]:
        text += (f" (it matched {u['LinesMatched']} line(s), but what it captured is not a number, "
                 f"e.g. {u['NotANumber']!r})")
    else:
        text += " (it matched no line of any host's log)"
    near = u["NearestLine"]
    if near:
        text += f"; nearest line, {near['Host']}: {near['Line'][:200]!r}"
    return text + "; FinalMetricDataList has no entry for it"


__all__ = ["METRICS_FILE", "MetricsObserver"]
