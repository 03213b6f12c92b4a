"""The SDK v3 half of ``python -m emulator launch``: ``Session()`` is the emulator's, wherever bound.

Before the launcher runs, in this process: every module attribute of ``sagemaker.*`` that is
``sagemaker.core.helper.session_helper.Session`` becomes a subclass of
:class:`~emulator.sdk.v3.session.EmulatorSession`, so ``Session()``, ``ModelTrainer`` without a
session (it makes ``Session()`` itself) and ``get_execution_role()`` (it asks ``Session()`` who the
caller is) all reach the emulator: ``ModelTrainer(...).train(...)`` runs its job on emulated hosts
whose ``[algo-N]`` lines are printed as they come, launcher-quirk warnings are printed when a job
ends, and S3, IAM, STS and CloudWatch Logs are answered by moto (nothing leaves the machine).
When no AWS region is configured, ``AWS_DEFAULT_REGION`` is set to ``us-west-2`` for the script
(the SDK needs one: it builds its CloudWatch Logs client from ``boto3.Session()``).

Jobs run on ``SAGEMAKER_EMULATOR_BACKEND`` with ``SAGEMAKER_EMULATOR_GPUS_PER_HOST`` emulated GPUs
(see :func:`emulator.sdk.redirect.emulator_options`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...job.request import DEFAULT_REGION
from ..redirect import emulator_options, import_all, patched_sdk

#: Modules that bind ``Session`` at import (imported first so their binding is patched too).
BINDERS = ("sagemaker.train", "sagemaker.train.model_trainer", "sagemaker.train.defaults",
           "sagemaker.core.helper.session_helper", "sagemaker.core", "sagemaker.core.s3",
           "sagemaker.core.s3.utils")


def _session_class() -> type:
    from .session import EmulatorSession

    options = emulator_options()

    class LaunchSession(EmulatorSession):
        """``Session`` as the launcher sees it: the emulator's, echoing host logs."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            for name in ("sagemaker_client", "sagemaker_runtime_client", "sagemaker_featurestore_runtime_client",
                         "sagemaker_metrics_client"):
                kwargs.pop(name, None)
            for key, value in options.items():
                kwargs.setdefault(key, value)
            kwargs.setdefault("echo", True)
            super().__init__(*args, **kwargs)

    LaunchSession.__name__ = LaunchSession.__qualname__ = "Session"
    return LaunchSession


@contextmanager
def redirected() -> Iterator[None]:
    """Patch SageMaker SDK v3 in this process so the launcher talks to the emulator."""
    import boto3

    set_region = boto3.session.Session().region_name is None and "AWS_DEFAULT_REGION" not in os.environ
    if set_region:
        os.environ["AWS_DEFAULT_REGION"] = DEFAULT_REGION
    import_all(BINDERS)
    from sagemaker.core.helper import session_helper

    from . import session as emu_session

    original = session_helper.Session
    patched = _session_class()
    try:
        with patched_sdk(lambda _, value: patched if value is original else value, skip=(emu_session,)):
            yield
    finally:
        if set_region:
            os.environ.pop("AWS_DEFAULT_REGION", None)
