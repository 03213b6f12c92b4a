"""``--emit-pytest FILE``: a pytest module that replays a recorded job and asserts its outcome.

The module holds the recorded document inline (``DOCUMENT``, the emulator's ``Emulator`` object
cut to its ``Framework``), the code and channel folders as constants to edit (``SOURCE_DIR``,
``CHANNELS``), and one test that prepares the replay with :func:`emulator.replay.prepare` and runs
its request through the ``sagemaker_job`` fixture (so ``--emulator-backend``, ``--emulator-profile``
and the log-tail report sections apply). What the test asserts is ``--expect``'s (:data:`EXPECT`):

- ``fix`` (the default): the fix, ``Completed``. A job recorded as anything else carries its
  recorded outcome as a strict ``xfail`` (reason: the ``FailureReason``'s first line), raised as
  ``RecordedFailure`` only when the replay ends as recorded (the status and the ``FailureReason``'s
  first line, :func:`emulator.replay.first_line`): the test xfails while the bug reproduces, fails
  on any other outcome, and fails as ``XPASS(strict)`` once the replay Completes, when the user
  drops the marker and keeps the test as the fix's regression test.
- ``recorded``: the recorded ``TrainingJobStatus`` and, for a failed job, the ``FailureReason``'s
  first line: a characterisation test, which passes while the job ends as it did on SageMaker.

A code archive and channels that were downloaded for the replay are copied next to the module
(``<module>.sourcedir.tar.gz``, ``<module>.channels/<name>``).
"""

from __future__ import annotations

import pprint
import re
import shutil
from pathlib import Path
from typing import Any

from ..errors import RequestError
from .mapping import Replay

#: ``--expect``'s choices: what the emitted test asserts (the first is the default).
FIX, RECORDED = "fix", "recorded"
EXPECT = (FIX, RECORDED)

TEMPLATE = '''"""Replay of SageMaker training job {name} (recorded: {status}).

Written by `python -m emulator replay --emit-pytest --expect {expect}`. Edit SOURCE_DIR and CHANNELS to
point at this machine's copies of the job's code and data, then run `pytest {file}`.
{what}"""

from __future__ import annotations

{imports}
#: The job's code (recorded: {code_recorded}): a folder or a sourcedir.tar.gz; None for an SDK v3 job.
SOURCE_DIR = {source_dir!r}
#: A folder for each channel (recorded location in the comment).
CHANNELS = {{
{channels}}}
HOSTS = {hosts!r}
GPUS_PER_HOST = {gpus!r}
RECORDED_STATUS = {status!r}

DOCUMENT = {document}

{test}'''

#: ``--expect recorded``: the recorded outcome (a characterisation test).
RECORDED_TEST = '''
def test_replay_{slug}(sagemaker_job, sagemaker_options, tmp_path):
    options = replay.Options(source_dir=SOURCE_DIR, channels=CHANNELS, hosts=HOSTS, gpus_per_host=GPUS_PER_HOST,
                             output_dir=tmp_path / "replay-out", profile=sagemaker_options.profile)
    with replay.prepare(DOCUMENT, options) as prepared:
        result = sagemaker_job(prepared.request)
    assert result.status == RECORDED_STATUS, result.failure_reason
    if RECORDED_STATUS == "Failed":
        assert replay.first_line(result.failure_reason) == replay.first_line(DOCUMENT["FailureReason"])
'''

#: ``--expect fix`` of a job recorded as anything but Completed: the fix, the recorded outcome a strict xfail.
FIX_TEST = '''
class RecordedFailure(AssertionError):
    """The replay ended as the job did on SageMaker: its status and the FailureReason's first line."""


# The recorded failure, expected while the bug is there: this test xfails while the replay ends as
# recorded (any other outcome fails it). Once the replay Completes, strict=True turns the pass into a
# failure, XPASS(strict): the bug is fixed, so drop this marker and keep the test as its regression test.
@pytest.mark.xfail(strict=True, raises=RecordedFailure, reason={reason!r})
def test_replay_{slug}(sagemaker_job, sagemaker_options, tmp_path):
    options = replay.Options(source_dir=SOURCE_DIR, channels=CHANNELS, hosts=HOSTS, gpus_per_host=GPUS_PER_HOST,
                             output_dir=tmp_path / "replay-out", profile=sagemaker_options.profile)
    with replay.prepare(DOCUMENT, options) as prepared:
        result = sagemaker_job(prepared.request)
    recorded = replay.first_line(DOCUMENT.get("FailureReason"))
    if result.status == RECORDED_STATUS and replay.first_line(result.failure_reason) == recorded:
        raise RecordedFailure(f"{{result.status}} as recorded: {{result.failure_reason}}")
    assert result.status == "Completed", result.failure_reason
'''

#: What the module's docstring says the test asserts, by ``--expect`` and whether the job Completed.
WHAT = {
    (FIX, True): "The test asserts that the replay Completes, as the job did.\n",
    (FIX, False): ("The test asserts the fix: the replay Completes. The recorded outcome ({status}) is a\n"
                   "strict xfail: the test xfails while the replay ends as recorded and fails (XPASS(strict))\n"
                   "once it Completes; drop the marker then.\n"),
    (RECORDED, True): "The test asserts the recorded outcome: the replay Completes.\n",
    (RECORDED, False): ("The test asserts the recorded outcome (a characterisation test): {status}, and the\n"
                        "FailureReason's first line. `--expect fix` asserts the fix instead.\n"),
}


def reason(document: dict[str, Any]) -> str:
    """The xfail's reason: the recorded ``FailureReason``'s first line (else the recorded status)."""
    text = str(document.get("FailureReason") or "").strip()
    return text.splitlines()[0].strip() if text else f"recorded: {document.get('TrainingJobStatus')}"


def inline(document: dict[str, Any]) -> dict[str, Any]:
    """The document as the module holds it: the ``Emulator`` object cut to what a replay reads."""
    out = {k: v for k, v in document.items() if k != "Emulator"}
    emulator = document.get("Emulator")
    if isinstance(emulator, dict):  # its presence says the TrainingImage may be the emulator's own
        framework = emulator.get("Framework")
        framework = framework if isinstance(framework, dict) else {}
        out["Emulator"] = {"Framework": {k: framework.get(k) for k in ("FrameworkVersion", "PyVersion", "Source")}}
    return out


def write(target: Path, replay: Replay, *, hosts: int | None, expect: str = FIX) -> Path:
    """Write the module for ``replay`` to ``target``, its test asserting what ``expect`` says (:data:`EXPECT`);
    return its path."""
    if expect not in EXPECT:
        raise RequestError("--expect", f"{expect!r} is not a choice", allowed="|".join(EXPECT))
    target = Path(target).expanduser().absolute()
    if not target.parent.is_dir():
        raise RequestError("--emit-pytest", f"{target.parent} is not an existing folder", allowed="a new .py file")
    if target.suffix != ".py":
        raise RequestError("--emit-pytest", f"{target.name} does not end in .py", allowed="e.g. test_replay_job.py")
    source_dir = None
    if replay.code is not None:
        source_dir = str(replay.code.local)
        if replay.code.how == "downloaded":  # its temp folder goes with the replay
            kept = target.with_name(f"{target.stem}.{replay.code.local.name}")
            shutil.copy2(replay.code.local, kept)
            source_dir = str(kept)
    local = {}
    for c in replay.channels:  # downloaded channels' temp folders go with the replay: keep a copy
        local[c.name] = c.local
        if c.how.startswith(("sampled", "downloaded")):
            local[c.name] = target.with_name(f"{target.stem}.channels") / c.name
            shutil.rmtree(local[c.name], ignore_errors=True)
            shutil.copytree(c.local, local[c.name])
    channels = "".join(f"    {c.name!r}: {str(local[c.name])!r},  # {c.recorded} ({c.how})\n" for c in replay.channels)
    status = replay.document.get("TrainingJobStatus")
    slug = re.sub(r"[^a-zA-Z0-9]+", "_", replay.recorded_name).strip("_").lower()[:40] or "job"
    completed = status == "Completed"
    xfail = expect == FIX and not completed
    test = (FIX_TEST if xfail else RECORDED_TEST).format(slug=slug, reason=reason(replay.document))
    text = TEMPLATE.format(name=replay.recorded_name, status=status, file=target.name, expect=expect,
                           what=WHAT[expect, completed].format(status=status),
                           imports="import pytest\n\nfrom emulator import replay\n" if xfail else
                           "from emulator import replay\n",
                           code_recorded=replay.code.recorded if replay.code else "none, its code is channels",
                           source_dir=source_dir, channels=channels, hosts=hosts,
                           gpus=replay.request.gpus_per_host, test=test,
                           document=pprint.pformat(inline(replay.document), width=110, sort_dicts=False))
    target.write_text(text)
    return target


__all__ = ["EXPECT", "FIX", "RECORDED", "inline", "reason", "write"]
