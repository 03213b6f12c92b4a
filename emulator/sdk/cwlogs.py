"""CloudWatch Logs for emulated jobs: each host's log, line by line, in moto's CloudWatch Logs.

On SageMaker every instance of a training job writes its container output to the log group
``/aws/sagemaker/TrainingJobs``, stream ``<job name>/algo-N-<epoch seconds>``; SDK v3's
``TrainingJob.wait(logs=True)`` waits until it sees one stream per instance
(``DescribeLogStreams``), then follows each with ``GetLogEvents`` and prints the events. The SDK
builds that client from a fresh ``boto3.Session()``, so the emulator does not hand it a client:
moto answers CloudWatch Logs for every boto3 client of this process while the S3 store is open
(:data:`~emulator.sdk.s3.MOCKED_SERVICES`), and :class:`LogFeed` puts each host's log lines there
as the host writes them. All lines are in before the job's status turns terminal (the client
closes the feed before it marks the job done), so the SDK's last read gets them all.

Not emulated: the real stream suffix (the emulator uses the job's start time for every host),
ingestion delay, the CloudWatch agent's line splitting of very long lines, retention.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from ..console import LogTailer

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
#: PutLogEvents limits (CloudWatch Logs API): events per call, and bytes per call (26 per event).
MAX_EVENTS = 10_000
MAX_BYTES = 1_048_576
EVENT_OVERHEAD = 26
MAX_MESSAGE = 262_144 - EVENT_OVERHEAD


def stream_name(job_name: str, host: str, started: float) -> str:
    """``<job>/algo-N-<epoch seconds>``, as SageMaker names a host's stream."""
    return f"{job_name}/{host}-{int(started)}"


class _Tailer(LogTailer):
    """A :class:`LogTailer` that hands each poll's lines to the feed in one batch."""

    def __init__(self, files: dict[str, Path], feed: LogFeed, echo_to: TextIO | None) -> None:
        self.feed = feed
        self.batch: dict[str, list[str]] = {h: [] for h in files}
        super().__init__(files, stream=echo_to, echo=echo_to is not None,
                         sink=lambda host, line: self.batch[host].append(line))

    def poll(self, final: bool = False) -> None:
        super().poll(final)
        for host, lines in self.batch.items():
            if lines:
                self.feed.put(host, lines)
                lines.clear()


class LogFeed:
    """Follows one job's host logs into CloudWatch Logs (moto) in each of ``regions``."""

    def __init__(self, job_name: str, logs: dict[str, Path], *, regions: Iterable[str], started: float,
                 echo_to: TextIO | None = None) -> None:
        """``echo_to``: also print each line there with an ``[algo-N]`` prefix, as ``run`` does."""
        import boto3

        self.job_name = job_name
        self.streams = {h: stream_name(job_name, h, started) for h in logs}
        self.clients = [boto3.session.Session(region_name=r).client("logs") for r in dict.fromkeys(regions)]
        for client in self.clients:
            _ensure_group(client)
            for name in self.streams.values():
                client.create_log_stream(logGroupName=LOG_GROUP, logStreamName=name)
        self._tailer = _Tailer(logs, self, echo_to)

    def start(self) -> LogFeed:
        self._tailer.start()
        return self

    def close(self) -> None:
        """Read what is left of every log and put it; after this the streams are complete."""
        self._tailer.stop()

    def put(self, host: str, lines: list[str]) -> None:
        now = int(time.time() * 1000)
        # CloudWatch Logs takes no empty messages (docker's awslogs driver drops empty lines too)
        events = [{"timestamp": now, "message": line[:MAX_MESSAGE]} for line in lines if line]
        for batch in _batches(events):
            for client in self.clients:
                client.put_log_events(logGroupName=LOG_GROUP, logStreamName=self.streams[host], logEvents=batch)


def _ensure_group(client: Any) -> None:
    try:
        client.create_log_group(logGroupName=LOG_GROUP)
    except client.exceptions.ResourceAlreadyExistsException:
        pass


def _batches(events: list[dict[str, Any]]) -> Iterable[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    size = 0
    for event in events:
        cost = len(event["message"].encode()) + EVENT_OVERHEAD
        if batch and (len(batch) >= MAX_EVENTS or size + cost > MAX_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(event)
        size += cost
    if batch:
        yield batch
