"""``python -m emulator replay``: run a recorded SageMaker training job again, here.

SOURCE is a DescribeTrainingJob document (a JSON file as ``aws sagemaker describe-training-job``
prints it, the emulator's own ``job.json`` or job folder) or a job name or ARN read with boto3
when AWS credentials are present (:mod:`.source`). The recorded request fields become a
CreateTrainingJob request that goes through the SDK session's translator, so the replay runs what
an SDK launch of that request runs (:mod:`.mapping`): same image (framework), hyperparameters byte
for byte, environment, stopping condition, checkpoint local path, resource config (``--hosts``
scales a homogeneous job); the code and channels come from local folders. A report before start
and the recorded outcome beside the replay's at the end (:mod:`.report`); ``--plan`` prints what
would run (as ``python -m emulator plan SOURCE`` does, the same code), ``--emit-pytest``
writes a regression test (:mod:`.emit`).

Not replayed: VPC, Debugger, Profiler, TensorBoard, Experiments, remote debugging and health-check
configs (reported); the effects of managed spot, retries, network isolation and traffic
encryption (carried as recorded, not emulated, as on the SDK session); channel data beyond
``--sample N`` objects per prefix (manifest channels and file systems always need ``--channel``),
and the code of a job given as a file (a job read by name has its ``sourcedir.tar.gz`` or v3
``code``/``sm_drivers`` channels downloaded); built-in and
Marketplace algorithms and images that are no PyTorch or Hugging Face DLC (refused).

Public: :func:`prepare` (a context manager yielding a :class:`Replay` whose ``request`` the
``sagemaker_job`` fixture or :func:`emulator.supervisor.run` runs), :class:`Options`,
:func:`first_line`, :class:`Outcome`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from .mapping import FetchCode, FetchPrefix, Options, Replay, build
from .report import Outcome, first_line


@contextmanager
def prepare(document: Mapping[str, Any], options: Options | None = None, *,
            fetch_code: FetchCode | None = None, fetch_prefix: FetchPrefix | None = None) -> Iterator[Replay]:
    """The replay of ``document``, validated; its temp folders are removed on exit."""
    options = options or Options()
    options = replace(options, source_dir=None if options.source_dir is None else Path(options.source_dir),
                      channels={k: Path(v) for k, v in dict(options.channels).items()},
                      output_dir=Path(options.output_dir))
    replay = build(dict(document) if isinstance(document, Mapping) else document, options, fetch_code=fetch_code,
                   fetch_prefix=fetch_prefix)
    try:
        yield replay
    finally:
        replay.cleanup()


__all__ = ["Options", "Outcome", "Replay", "first_line", "prepare"]
