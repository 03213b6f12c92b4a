"""The SageMaker Python SDK v3 (``ModelTrainer``) front end; importing it imports ``sagemaker.core``.

* :mod:`.session` — :class:`~emulator.sdk.v3.session.EmulatorSession` (``sagemaker_session=``),
  and the boto3 session under it whose ``client("sagemaker")`` is the emulator's.
* :mod:`.launch` — the v3 half of ``python -m emulator launch``.
* :mod:`.trainer` — ``ModelTrainer`` keyword arguments → a job (the pytest plugin's v3 shape).

The SDK-independent pieces it shares with the v2 front end live one level up: the SageMaker client
stand-in (:mod:`emulator.sdk.client`), the request translation, S3 (:mod:`emulator.sdk.s3`),
CloudWatch Logs (:mod:`emulator.sdk.cwlogs`) and the caller's identity (:mod:`emulator.sdk.aws`).
"""

from __future__ import annotations

from .session import EmulatorSession

__all__ = ["EmulatorSession"]
