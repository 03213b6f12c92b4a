"""``python -m emulator replay SOURCE …`` and ``plan SOURCE …``: the command line (routed by
:func:`emulator.backends.run_tool`). ``plan SOURCE …`` is ``replay --plan SOURCE …`` (one code path).

Exit status: 0 iff the replay's ``TrainingJobStatus`` equals the recorded one (``--plan`` and
``--emit-pytest``: 0 once printed or written, nothing started); 1 when they differ; 2 for bad
input, refused before any host starts and leaving nothing behind; 3 when the emulator cannot run
here; 130/143 on Ctrl-C/SIGTERM (the hosts are stopped, as ``run`` does).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ..backends import AUTO, BACKENDS, DEFAULT_BACKEND
from ..cli import error_exit, terminate_on_sigterm
from ..errors import EmulatorError, RequestError, Terminated
from ..job.profiles import EXACT
from . import emit, prepare, report
from .mapping import Options, Replay, check_document, region_of
from .source import load, sampler

#: What ``plan SOURCE`` prints, and which arguments it takes (:func:`plan`).
PLAN_DESCRIPTION = ("Print what `replay --plan SOURCE` prints for the same arguments: the replay report "
                    "(stderr) and the plan and launch spec (stdout, as `plan --entry-point` prints them); "
                    "start nothing. SOURCE comes first (`plan`'s other form, `plan --entry-point FILE …`, "
                    "has no positional argument, so nothing is guessed from a file's name or content): it is "
                    "read exactly as `replay` reads it.")

PLAN_USAGE = ("%(prog)s SOURCE [--source-dir DIR_OR_TAR] [--channel NAME=PATH ...] [--sample N] [--hosts N] "
              "[--gpus-per-host K] [--backend auto|process|docker] [--output-dir DIR] [--profile exact|ci] "
              "[--framework-version V]")


def parser() -> argparse.ArgumentParser:
    """``replay``'s arguments: SOURCE, what the replay of it runs (:func:`_source_flags`), and what
    replay does instead of running (``--plan``, ``--emit-pytest``) or while running (``--quiet``)."""
    p = argparse.ArgumentParser(prog="python -m emulator replay",
                                description="Run a recorded SageMaker training job again on emulated hosts; "
                                            f"{report.RULE}.")
    _source_flags(p)
    p.add_argument("--plan", action="store_true", help="print the report (stderr) and the plan (stdout, as `plan` "
                                                       "prints it); start nothing (the same as `plan SOURCE …`)")
    p.add_argument("--emit-pytest", metavar="FILE", help="write a pytest module that replays the job and asserts "
                                                         "what --expect says; start nothing")
    p.add_argument("--expect", choices=emit.EXPECT, metavar="|".join(emit.EXPECT),
                   help="with --emit-pytest, what the test asserts: fix (default): Completed, a recorded failure "
                        "a strict xfail that fails (XPASS) once the replay Completes; recorded: the recorded "
                        "outcome (a characterisation test)")
    p.add_argument("--quiet", action="store_true", help="no live host logs")
    return p


def plan_parser() -> argparse.ArgumentParser:
    """``plan SOURCE``'s arguments: ``replay``'s, less those that do something other than plan
    (``--emit-pytest`` and its ``--expect`` write a file, ``--quiet`` quiets a run), with ``--plan`` implied."""
    p = argparse.ArgumentParser(prog="python -m emulator plan", description=PLAN_DESCRIPTION, usage=PLAN_USAGE)
    _source_flags(p)
    p.set_defaults(plan=True, emit_pytest=None, expect=None, quiet=False)
    return p


def _source_flags(p: argparse.ArgumentParser) -> None:
    """SOURCE and the options that decide what its replay runs (``replay`` and ``plan SOURCE``)."""
    p.add_argument("source", metavar="SOURCE",
                   help="a DescribeTrainingJob JSON file (aws sagemaker describe-training-job --training-job-name "
                        "NAME > job.json), an emulator job.json or job folder, or a job name or ARN (read with "
                        "boto3; needs AWS credentials)")
    p.add_argument("--source-dir", metavar="DIR_OR_TAR",
                   help="the job's code (SDK v2: what sagemaker_submit_directory names), a folder or a .tar.gz")
    p.add_argument("--channel", action="append", default=[], metavar="NAME=PATH",
                   help="the folder standing for a channel's S3 URI (repeat; SDK v3 jobs: also code= and sm_drivers=)")
    p.add_argument("--sample", type=int, metavar="N",
                   help="download the first N objects under each channel's S3 prefix that has no --channel folder "
                        "(needs AWS credentials; removed after the replay)")
    p.add_argument("--hosts", type=int, help="scale ResourceConfig.InstanceCount (homogeneous jobs only)")
    p.add_argument("--gpus-per-host", type=int, help="emulate fewer GPUs per host than the instance type has")
    p.add_argument("--backend", default=DEFAULT_BACKEND, choices=[AUTO, *BACKENDS])
    p.add_argument("--output-dir", default="./replay-out", help="the replay's job folder goes here")
    p.add_argument("--profile", metavar="exact|ci",
                   help=f"exact or ci (see docs/reference/profiles.md); default: the profile an emulator "
                        f"job.json records, else {EXACT}")
    p.add_argument("--framework-version", help="run this framework instead of the one TrainingImage names "
                                               "('current': this machine's torch)")


def channels(values: Sequence[str]) -> dict[str, Path]:
    out = {}
    for item in values:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise RequestError("--channel", f"{item!r} is not NAME=PATH", allowed="e.g. --channel training=./data")
        out[name] = Path(path)
    return out


def options(args: argparse.Namespace) -> Options:
    return Options(source_dir=Path(args.source_dir) if args.source_dir else None, channels=channels(args.channel),
                   hosts=args.hosts, gpus_per_host=args.gpus_per_host, output_dir=Path(args.output_dir),
                   profile=args.profile, framework_version=args.framework_version, sample=args.sample)


def main(argv: Sequence[str] = ()) -> int:
    """``python -m emulator replay …``."""
    p = parser()
    args = p.parse_args(list(argv))
    if args.expect and not args.emit_pytest:
        p.error("argument --expect: applies to --emit-pytest only (what the emitted test asserts)")
    return _guarded(args)


def plan(argv: Sequence[str] = ()) -> int:
    """``python -m emulator plan SOURCE …``: ``replay --plan SOURCE …``, the same code path."""
    return _guarded(plan_parser().parse_args(list(argv)))


def _guarded(args: argparse.Namespace) -> int:
    """:func:`_main`, with replay's exit statuses for an emulator error, SIGTERM and Ctrl-C."""
    try:
        return _main(args)
    except EmulatorError as exc:
        return error_exit(exc)
    except Terminated:
        print("terminated (SIGTERM): the replay was stopped and its hosts torn down", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("interrupted: the replay was stopped and its hosts torn down", file=sys.stderr)
        return 130


def _main(args: argparse.Namespace) -> int:
    loaded = load(args.source)
    fetch_prefix = loaded.fetch_prefix
    if args.sample is not None and fetch_prefix is None:
        fetch_prefix = sampler(region_of(check_document(loaded.document)))
    with prepare(loaded.document, options(args), fetch_code=loaded.fetch_code, fetch_prefix=fetch_prefix) as replay:
        _say(report.before(replay, loaded.origin), sys.stderr if args.plan else sys.stdout)
        if args.emit_pytest:
            written = emit.write(Path(args.emit_pytest), replay, hosts=args.hosts, expect=args.expect or emit.FIX)
            print(f"wrote {written}: edit SOURCE_DIR and CHANNELS there, then run `pytest {written}`",
                  file=sys.stderr if args.plan else sys.stdout)
        if args.plan:
            from ..cli import plan_document

            json.dump(plan_document(replay.request, args.backend), sys.stdout, indent=2, default=str)
            print()
        if args.plan or args.emit_pytest:
            return 0
        description = _run(replay, args)
    outcome = report.Outcome.of(replay.document, description)
    _say(outcome.lines(), sys.stdout)
    return 0 if outcome.same_status else 1


def _run(replay: Replay, args: argparse.Namespace) -> dict[str, Any]:
    from ..supervisor import run

    previous = signal.signal(signal.SIGTERM, terminate_on_sigterm)
    try:
        result = run(replay.request, backend=args.backend, echo=not args.quiet)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.quiet:
        print(f"{result.job_name}: {result.status}" + (f" — {result.failure_reason}" if result.failure_reason else ""))
    return dict(result.description)


def _say(lines: Sequence[str], stream: TextIO) -> None:
    stream.write("".join(f"{line}\n" for line in lines))
    stream.flush()


__all__ = ["main", "parser", "plan", "plan_parser"]
