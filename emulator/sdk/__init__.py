"""The SageMaker SDK front ends: SDK v2 and v3 sessions whose training jobs run on the emulator.

* :mod:`.session` — SDK v2's :class:`~emulator.sdk.session.EmulatorSession` (``sagemaker_session=``).
* :mod:`.v3` — SDK v3's ``EmulatorSession`` for ``ModelTrainer`` (and its half of ``launch``).
* :mod:`.client` — the stand-in SageMaker client behind both (training jobs only).
* :mod:`.tuning` — CreateHyperParameterTuningJob validated, and the training jobs it implies (pure).
* :mod:`.tuning_jobs` — SDK v2 ``HyperparameterTuner`` jobs run on the emulator (the tuning calls).
* :mod:`.translate` — CreateTrainingJob request (either SDK's shape) → :class:`~emulator.job.request.JobRequest`.
* :mod:`.s3` — S3 (and STS, IAM, CloudWatch Logs) through moto, S3 mirrored to a local folder.
* :mod:`.cwlogs` — each host's log as a CloudWatch Logs stream (what v3's ``train(logs=True)`` reads).
* :mod:`.aws` — the caller's identity and IAM answers v3's role validation needs.
* :mod:`.versions` — which SDK major is installed (and a v2/v3 mix, refused).
* :mod:`.launch` — ``python -m emulator launch script.py``: an unmodified launcher, redirected.

Importing this package imports nothing heavy; the submodules import ``sagemaker`` and ``moto``
(``versions`` imports neither).
"""
