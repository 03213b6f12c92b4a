"""Checkpoint sync between each host's checkpoint folder and the job's one checkpoint location.

Oracle: AWS's model-checkpoints guide (``/work/shared/reference/sagemaker-job-lifecycle-and-smddp.md``,
"Checkpoint sync"): existing checkpoints are written to every instance at the start; new local files
are uploaded continually; "If a checkpoint is deleted in the SageMaker container, it will also be
deleted in the S3 folder"; one S3 location for all instances. So a file only restored to a host is
not uploaded again: a host that did not write a checkpoint cannot replace the one another host wrote
(found with Lightning's ``last.ckpt``, written by global rank 0 on algo-1, issue 55).
"""

from __future__ import annotations

import os
from pathlib import Path

from emulator.backends import materialise

from .test_bad_input import workspace  # noqa: F401  (a fixture)
from .test_fidelity_plan import _plan, src  # noqa: F401  (src is a fixture)


def _restore(job, checkpoints: Path) -> dict[str, Path]:  # type: ignore[no-untyped-def]
    """Write each host's tree (restoring the checkpoints); each host's checkpoint folder."""
    materialise.write_all(job)
    folders = {h.name: materialise.checkpoint_folder(job.request, h.name) for h in job.hosts}
    return {name: folder for name, folder in folders.items() if folder is not None}


def test_a_restored_file_left_alone_does_not_replace_what_another_host_wrote(src: Path, tmp_path: Path) -> None:  # noqa: F811
    checkpoints = tmp_path / "ck"
    (checkpoints / "run").mkdir(parents=True)
    (checkpoints / "run" / "last.ckpt").write_bytes(b"epoch-1")
    (checkpoints / "old.ckpt").write_bytes(b"old")
    (checkpoints / "kept.ckpt").write_bytes(b"kept")
    job = _plan(src, instance_count=3, checkpoint_dir=checkpoints)
    folders = _restore(job, checkpoints)
    assert all((f / "run" / "last.ckpt").read_bytes() == b"epoch-1" for f in folders.values())
    # algo-1 rewrites last.ckpt (same size) and deletes old.ckpt; algo-2 writes its own shard;
    # algo-3 only received the checkpoints. Hosts are synced in name order: algo-3 comes last.
    (folders["algo-1"] / "run" / "last.ckpt").write_bytes(b"epoch-2")
    (folders["algo-1"] / "old.ckpt").unlink()
    (folders["algo-2"] / "shard-2.pt").write_bytes(b"two")
    materialise.sync_checkpoints(job, job.request.job_dir)
    assert (checkpoints / "run" / "last.ckpt").read_bytes() == b"epoch-2"
    assert not (checkpoints / "old.ckpt").exists()
    assert (checkpoints / "shard-2.pt").read_bytes() == b"two"
    assert (checkpoints / "kept.ckpt").read_bytes() == b"kept"


def test_a_copy_that_rounded_the_mtime_is_not_a_change(src: Path, tmp_path: Path) -> None:  # noqa: F811
    """Files copied back through the engine's API (docker over TCP) keep whole-second mtimes: a
    restored file whose bytes did not change is not uploaded; one whose bytes changed is."""
    checkpoints = tmp_path / "ck"
    checkpoints.mkdir()
    (checkpoints / "a.pt").write_bytes(b"aaaa")
    (checkpoints / "b.pt").write_bytes(b"bbbb")
    job = _plan(src, instance_count=2, checkpoint_dir=checkpoints)
    folders = _restore(job, checkpoints)
    for folder in folders.values():
        for name in ("a.pt", "b.pt"):
            st = (folder / name).stat()
            os.utime(folder / name, ns=(st.st_atime_ns, st.st_mtime_ns - st.st_mtime_ns % 1_000_000_000 - 1))
    (folders["algo-1"] / "b.pt").write_bytes(b"BBBB")
    materialise.sync_checkpoints(job, job.request.job_dir)
    assert (checkpoints / "a.pt").read_bytes() == b"aaaa"
    assert (checkpoints / "b.pt").read_bytes() == b"BBBB"


def test_the_latest_write_of_one_name_wins(src: Path, tmp_path: Path) -> None:  # noqa: F811
    """Two hosts writing one name (the single S3 prefix has no per-instance suffix): the later write
    is what the location holds, whichever host's name sorts first."""
    checkpoints = tmp_path / "ck"
    job = _plan(src, instance_count=2, checkpoint_dir=checkpoints)
    folders = _restore(job, checkpoints)
    (folders["algo-2"] / "same.pt").write_bytes(b"from algo-2, first")
    (folders["algo-1"] / "same.pt").write_bytes(b"from algo-1, later")
    st = (folders["algo-2"] / "same.pt").stat()
    os.utime(folders["algo-1"] / "same.pt", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    materialise.sync_checkpoints(job, job.request.job_dir)
    assert (checkpoints / "same.pt").read_bytes() == b"from algo-1, later"
