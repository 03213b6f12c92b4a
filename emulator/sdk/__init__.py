"""The SageMaker SDK front end: an SDK v2 ``Session`` whose training jobs run on the emulator.

* :mod:`.session` — :class:`~emulator.sdk.session.EmulatorSession` (``sagemaker_session=``).
* :mod:`.client` — the stand-in SageMaker client behind it (training jobs only).
* :mod:`.translate` — CreateTrainingJob request → :class:`~emulator.request.JobRequest`.
* :mod:`.s3` — S3 through moto, mirrored to a local folder.
* :mod:`.launch` — ``python -m emulator launch script.py``: an unmodified launcher, redirected.

Importing this package imports nothing heavy; the submodules import ``sagemaker`` and ``moto``.
"""
