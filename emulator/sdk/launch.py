"""``python -m emulator launch launch.py [args]``: run an unmodified SDK launcher on the emulator.

Which SDK the launcher uses is read from what is installed (:mod:`.versions`): v2 and v3 install
the same ``sagemaker`` package, so an environment holds one of them; a mix of both is refused
before anything runs (exit status 2, naming what was found and how to fix it).

SDK v2, inside this process before the script runs: ``sagemaker.Session`` (wherever the SDK bound
it) is :class:`~emulator.sdk.session.EmulatorSession`, ``sagemaker.get_execution_role()`` returns
a fixed role ARN, and every boto3 S3/STS/IAM call is answered by moto backed by the local S3
folder (any other AWS service is refused by moto: nothing leaves the machine). SDK v3: see
:mod:`emulator.sdk.v3.launch`. Then the script runs with ``runpy.run_path`` as ``__main__`` with
``sys.argv = [script, *args]``.

A PyTorch DLC ``TrainingImage`` (which the SDK derives from ``framework_version``/``py_version``)
decides the torch and Python the job runs with (:mod:`emulator.job.frameworks`); the process backend
runs this machine's toolkit whatever the image. The script's ``SystemExit`` code
becomes the command's exit code; an uncaught exception prints its traceback and gives 1.

Environment: ``SAGEMAKER_EMULATOR_S3_DIR`` (S3 folder), ``SAGEMAKER_EMULATOR_BACKEND``
(``auto``, the default, or ``process``/``docker``), ``SAGEMAKER_EMULATOR_GPUS_PER_HOST`` (emulate fewer
GPUs per host),
``SAGEMAKER_EMULATOR_FRAMEWORK_VERSION=current`` (today's torch instead of the DLC's the launcher's
``framework_version``/``image_uri`` names),
``SAGEMAKER_EMULATOR_PROFILE`` (``exact``, the default, or ``ci``: :mod:`emulator.job.profiles`).
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from ..errors import RequestError
from .redirect import emulator_options, import_all, patched_sdk
from .versions import installed_major


def _session_factory(original: type) -> type:
    from .client import print_warnings
    from .session import EmulatorSession

    options = emulator_options()

    class LaunchSession(EmulatorSession):
        """``sagemaker.Session`` as the launcher sees it."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("sagemaker_client", None)
            for key, value in options.items():
                kwargs.setdefault(key, value)
            super().__init__(*args, **kwargs)
            self.emulator_client.on_finish.append(print_warnings)

    LaunchSession.__name__ = LaunchSession.__qualname__ = "Session"
    return LaunchSession


@contextmanager
def redirected() -> Iterator[None]:
    """Patch SageMaker SDK v2 in this process so the launcher talks to the emulator."""
    import sagemaker.session

    import_all(("sagemaker.estimator", "sagemaker.pytorch", "sagemaker.pytorch.estimator",
                "sagemaker.fw_utils", "sagemaker.s3", "sagemaker.inputs"))
    from . import session as emu_session

    original = sagemaker.session.Session
    patched = _session_factory(original)

    def get_execution_role(sagemaker_session: Any = None, use_default: bool = False) -> str:
        return emu_session.EMULATOR_ROLE

    def replace(attr: str, value: Any) -> Any:
        if value is original:
            return patched
        if attr == "get_execution_role" and callable(value):
            return get_execution_role
        return value

    with patched_sdk(replace, skip=(emu_session,)):
        yield


def launch(script: str, args: Sequence[str]) -> int:
    """Run ``script`` with ``args`` against the emulator; return its exit code."""
    if not os.path.isfile(script):
        print(f"error: launcher script {script!r} does not exist", file=sys.stderr)
        return 2
    try:
        major = installed_major()
    except RequestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if major is None:
        print("error: no SageMaker Python SDK is installed; install `sagemaker-cluster-emulator[sdk]` "
              "(SDK v2) or `[sdk3]` (SDK v3)", file=sys.stderr)
        return 2
    try:
        emulator_options()
    except RequestError as exc:  # e.g. an unknown SAGEMAKER_EMULATOR_PROFILE: refused before the script runs
        print(f"error: {exc}", file=sys.stderr)
        return 2
    redirect: AbstractContextManager[None]
    if major == 3:
        from .v3.launch import redirected as redirected_v3

        redirect = redirected_v3()
    else:
        redirect = redirected()
    argv = sys.argv
    sys.argv = [script, *args]
    script_dir = os.path.dirname(os.path.abspath(script))
    sys.path.insert(0, script_dir)
    try:
        with redirect:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        raise
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        sys.argv = argv
        if sys.path and sys.path[0] == script_dir:
            sys.path.pop(0)
    return 0
