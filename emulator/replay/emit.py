"""``--emit-pytest FILE``: a pytest module that replays a recorded job and asserts its outcome.

The module holds the recorded document inline (``DOCUMENT``, the emulator's ``Emulator`` object
cut to its ``Framework``), the code and channel folders as constants to edit (``SOURCE_DIR``,
``CHANNELS``), and one test that prepares the replay with :func:`emulator.replay.prepare`, runs its
request through the ``sagemaker_job`` fixture (so ``--emulator-backend``, ``--emulator-profile`` and
the log-tail report sections apply), and asserts the recorded ``TrainingJobStatus`` and, for a
failed job, the ``FailureReason``'s first line (:func:`emulator.replay.first_line`).
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

TEMPLATE = '''"""Replay of SageMaker training job {name} (recorded: {status}).

Written by `python -m emulator replay --emit-pytest`. Edit SOURCE_DIR and CHANNELS to point at this
machine's copies of the job's code and data, then run `pytest {file}`.
"""

from __future__ import annotations

from emulator import replay

#: The job's code (recorded: {code_recorded}): a folder or a sourcedir.tar.gz; None for an SDK v3 job.
SOURCE_DIR = {source_dir!r}
#: A folder for each channel (recorded location in the comment).
CHANNELS = {{
{channels}}}
HOSTS = {hosts!r}
GPUS_PER_HOST = {gpus!r}
RECORDED_STATUS = {status!r}

DOCUMENT = {document}


def test_replay_{slug}(sagemaker_job, sagemaker_options, tmp_path):
    options = replay.Options(source_dir=SOURCE_DIR, channels=CHANNELS, hosts=HOSTS, gpus_per_host=GPUS_PER_HOST,
                             output_dir=tmp_path / "replay-out", profile=sagemaker_options.profile)
    with replay.prepare(DOCUMENT, options) as prepared:
        result = sagemaker_job(prepared.request)
    assert result.status == RECORDED_STATUS, result.failure_reason
    if RECORDED_STATUS == "Failed":
        assert replay.first_line(result.failure_reason) == replay.first_line(DOCUMENT["FailureReason"])
'''


def inline(document: dict[str, Any]) -> dict[str, Any]:
    """The document as the module holds it: the ``Emulator`` object cut to what a replay reads."""
    out = {k: v for k, v in document.items() if k != "Emulator"}
    emulator = document.get("Emulator")
    if isinstance(emulator, dict):  # its presence says the TrainingImage may be the emulator's own
        framework = emulator.get("Framework")
        framework = framework if isinstance(framework, dict) else {}
        out["Emulator"] = {"Framework": {k: framework.get(k) for k in ("FrameworkVersion", "PyVersion", "Source")}}
    return out


def write(target: Path, replay: Replay, *, hosts: int | None) -> Path:
    """Write the module for ``replay`` to ``target``; return its path."""
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
    text = TEMPLATE.format(name=replay.recorded_name, status=status, file=target.name,
                           code_recorded=replay.code.recorded if replay.code else "none, its code is channels",
                           source_dir=source_dir, channels=channels, hosts=hosts,
                           gpus=replay.request.gpus_per_host, slug=slug,
                           document=pprint.pformat(inline(replay.document), width=110, sort_dicts=False))
    target.write_text(text)
    return target


__all__ = ["inline", "write"]
