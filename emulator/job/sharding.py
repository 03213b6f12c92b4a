"""``ShardedByS3Key``: each host gets its own share of a channel's objects.

AWS documents the outcome, not the rule: "If there are n ML compute instances launched for a
training job, each instance gets approximately 1/n of the number of S3 objects. […] Don't choose
more ML compute instances for training than available S3 objects. If you do, some nodes won't get
any data" (CreateTrainingJob API reference, ``S3DataSource.S3DataDistributionType``; botocore
``sagemaker/2017-07-24/service-2.json``). Which object lands on which instance is not documented.

The emulator's rule, chosen to satisfy that and nothing more: the channel's objects (every file
under the channel folder; its key is the path relative to the folder, ``/``-separated) are sorted
by key as S3 lists them (UTF-8 byte order), and the i-th key goes to host ``algo-(i mod n + 1)``.
The shares are disjoint, together they are the whole channel, and their sizes differ by at most
one object; with fewer objects than hosts the last hosts get an empty channel. Do not rely on
which host gets which object: SageMaker does not promise it. ``FullyReplicated`` (the default)
gives every host every object.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path


def keys(folder: Path) -> list[str]:
    """The channel's object keys: every file under ``folder``, relative, in S3 listing order."""
    found = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
    return sorted(found, key=lambda k: k.encode())


def share(folder: Path, hosts: Sequence[str], host: str) -> list[str]:
    """The keys ``host`` gets out of ``hosts`` (in ``algo-N`` order) (see the module docstring)."""
    index, n = list(hosts).index(host), len(hosts)
    return [k for i, k in enumerate(keys(folder)) if i % n == index]


def write_share(folder: Path, chosen: Sequence[str], target: Path, *, link: bool = True) -> None:
    """Put the files ``chosen`` from ``folder`` under ``target``: hard links where ``link`` and the
    filesystem allow (for read-only mounts), else copies; never symlinks, which a container could
    not follow."""
    target.mkdir(parents=True, exist_ok=True)
    for key in chosen:
        src, dst = folder / key, target / key
        dst.parent.mkdir(parents=True, exist_ok=True)
        if link:
            try:
                os.link(src, dst)
                continue
            except OSError:  # another filesystem, or not allowed: copy
                pass
        shutil.copy2(src, dst)
