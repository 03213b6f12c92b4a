"""CloudWatch Metrics for emulated jobs: the metric definitions' data points, in moto's CloudWatch.

SageMaker sends what a job's ``MetricDefinitions`` read from its logs to CloudWatch Metrics,
namespace ``/aws/sagemaker/TrainingJobs``, dimension ``TrainingJobName``; the SDK v2's
``TrainingJobAnalytics`` (``estimator.training_job_analytics``) reads them back with
``GetMetricStatistics`` (``Average`` over ``Period``-second bins) between the job's start and a
minute after its end. The emulator puts each point of the job's ``metrics.json`` there (moto
answers CloudWatch for every boto3 client of this process while the S3 store is open,
:data:`~emulator.sdk.s3.MOCKED_SERVICES`) the first time the job is described after it ended, so
a launcher in another process (``Estimator.attach``) finds them as well.

Not emulated: the ``Host`` dimension and SageMaker's own instance metrics (CPU, memory, GPU),
publishing while the job runs (points appear once it has ended), CloudWatch's retention.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

NAMESPACE = "/aws/sagemaker/TrainingJobs"
#: PutMetricData takes at most 1000 data points per call.
BATCH = 1000


def publish(job_name: str, metrics_file: Path, *, region: str) -> int:
    """Put the points of ``metrics_file`` (written by :mod:`emulator.diagnostics.metrics`) into
    CloudWatch, unless this process's CloudWatch has the job's metrics already (another session
    described it); how many were put."""
    import boto3

    try:
        points = json.loads(metrics_file.read_text())["Points"]
    except (OSError, ValueError, KeyError):
        return 0
    data: list[dict[str, Any]] = [
        {"MetricName": p["MetricName"], "Value": float(p["Value"]),
         "Timestamp": datetime.fromisoformat(p["Timestamp"]),
         "Dimensions": [{"Name": "TrainingJobName", "Value": job_name}]} for p in points]
    client = boto3.session.Session(region_name=region).client("cloudwatch")
    dimension = [{"Name": "TrainingJobName", "Value": job_name}]
    if not data or client.list_metrics(Namespace=NAMESPACE, Dimensions=dimension).get("Metrics"):
        return 0
    for i in range(0, len(data), BATCH):
        client.put_metric_data(Namespace=NAMESPACE, MetricData=data[i:i + BATCH])
    return len(data)


__all__ = ["NAMESPACE", "publish"]
