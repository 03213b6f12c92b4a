"""Command line: ``python -m emulator run|plan|reap|launch|timeline|shell|ps|doctor|cache|replay``.

``run`` and ``plan`` take the same flags (the stable contract other tools rely on). ``run`` exits
0 if and only if the job Completed. ``replay`` runs a recorded job again from its DescribeTrainingJob
(:mod:`emulator.replay`; exit 0 iff it ends with the recorded status); ``plan SOURCE …`` (a first
argument that is no option) is ``replay --plan SOURCE …`` (:data:`PLAN_FORMS`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from .backends import AUTO, BACKENDS, DEFAULT_BACKEND
from .errors import EmulatorError, RequestError, Terminated
from .inhost.protocol import STOP_GRACE, scratch_prefix
from .job.instance_types import DEFAULT_INSTANCE_TYPE
from .job.profiles import PROFILE_VAR

#: ``plan``'s two forms, told apart by its first argument (:func:`plans_a_source`).
PLAN_FORMS = ("Print the plan and the launch spec, exactly what starts; start nothing. Two forms, told apart by "
              "the first argument. `plan SOURCE [OPTIONS]`: SOURCE first (a DescribeTrainingJob JSON file, an "
              "emulator job.json or job folder, or a job name or ARN), read as `replay` reads it, with replay's "
              "options but --plan (implied), --emit-pytest, --expect and --quiet (`plan SOURCE --help` lists "
              "them); it prints exactly what `replay --plan SOURCE [OPTIONS]` prints. `plan --entry-point FILE "
              "[job flags]`, below: what `run` with the same flags starts. A first argument that is no option is "
              "always SOURCE (this form has none): a training script there is refused (it is not JSON), never "
              "planned.")


def plans_a_source(argv: Sequence[str]) -> bool:
    """``plan SOURCE …`` (``replay --plan``'s code path): ``plan``'s first argument is no option. The
    other form, ``plan --entry-point FILE …``, has no positional argument, so it never starts with one."""
    return len(argv) > 1 and argv[0] == "plan" and not argv[1].startswith("-")


def _kv(values: Sequence[str], field: str) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RequestError(field, f"{item!r} is not NAME=VALUE")
        out[key] = value
    return out


def _json(text: str | None, field: str, kind: type) -> Any:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise RequestError(field, f"not valid JSON ({exc})") from None
    if not isinstance(value, kind):
        raise RequestError(field, f"must be a JSON {'object' if kind is dict else kind.__name__}, "
                           f"got {type(value).__name__}")
    return value


def _job_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--entry-point", required=True, help="the training script, relative to --source-dir")
    p.add_argument("--source-dir", help="folder shipped as /opt/ml/code (default: the entry point's folder)")
    p.add_argument("--hosts", type=int, default=1, help="instance count (algo-1..N)")
    p.add_argument("--instance-type", default=DEFAULT_INSTANCE_TYPE)
    p.add_argument("--gpus-per-host", type=int, help="emulate fewer GPUs than the type has")
    p.add_argument("--gpu-memory", default="off", choices=("count", "off"),
                   help="emulated GPUs count the memory CUDA would hold and raise CUDA's OutOfMemoryError past "
                        "the type's GPU memory (count: about 1.5x the CPU of a small FSDP job), or report it "
                        "all free (off, default)")
    p.add_argument("--gpu-memory-gib", type=float, default=None, metavar="GIB",
                   help="memory per emulated GPU, less than the type's (a MIG slice, a shared GPU)")
    p.add_argument("--distribution",
                   help='SDK distribution dict as JSON, e.g. \'{"torch_distributed": {"enabled": true}}\'')
    p.add_argument("--hyperparameters", help="JSON object of hyperparameters (plain values)")
    p.add_argument("--channel", action="append", default=[], metavar="NAME=DIR")
    p.add_argument("--sharded-channel", action="append", default=[], metavar="NAME=DIR",
                   help="a channel with S3DataDistributionType ShardedByS3Key (each host gets its own share)")
    p.add_argument("--checkpoint-local-path", help="CheckpointConfig.LocalPath (default /opt/ml/checkpoints; "
                   "needs --checkpoint-dir)")
    p.add_argument("--env", action="append", default=[], metavar="K=V")
    p.add_argument("--metric-definition", action="append", default=[], metavar="NAME=REGEX",
                   help="a MetricDefinition (the name ends at the first '='), read from the hosts' logs "
                        "into FinalMetricDataList; repeat for more")
    p.add_argument("--max-run", type=int, default=86_400, metavar="SECONDS")
    p.add_argument("--job-name")
    p.add_argument("--output-dir", default="./out", help="a folder per job goes here")
    p.add_argument("--backend", default=DEFAULT_BACKEND, choices=[AUTO, *BACKENDS],
                   help="auto (default): the process backend where this machine allows its namespaces, "
                        "else docker where an engine answers (the choice and why: console and job.json)")
    p.add_argument("--image", help="docker backend: image to run (a PyTorch DLC URI maps to the emulator's "
                   "image of that framework version)")
    p.add_argument("--framework-version", help="the estimator's framework_version (e.g. 1.12.1): run with "
                   "that DLC's torch and Python; 'current': this machine's torch / the default image")
    p.add_argument("--py-version", help="the estimator's py_version (e.g. py38; default: the DLC's)")
    p.add_argument("--checkpoint-dir", help="local folder standing for checkpoint_s3_uri")
    p.add_argument("--pytorchddp-encoding", choices=["smdistributed", "pytorch_ddp"], default="smdistributed",
                   help="pytorchddp as SDK >=2.221.1 sends it (smdistributed) or as 2022's SDK did")
    p.add_argument("--short-toolkit-sleeps", action="store_true",
                   help="cap the toolkit's 30-s MPI-family waits at 1 s and its 1-s polls at 0.2 s "
                   "(a deviation; never for --real comparisons)")
    p.add_argument("--fast-start", action="store_true",
                   help="fork torchrun and its ranks from a pre-imported interpreter per host where the job's "
                        "PYTHONHASHSEED is a fixed number (process backend; a recorded deviation, "
                        "see docs/reference/performance.md)")
    p.add_argument("--profile", default=None, metavar="exact|ci",
                   help=f"exact (default, unless ${PROFILE_VAR} names another): every host as on SageMaker; ci: "
                        "every speed-up that changes nothing a script can observe except time "
                        "(see docs/reference/profiles.md)")
    p.add_argument("--forward-aws-credentials", action="store_true",
                   help="pass this machine's AWS credentials into the hosts (off by default)")
    p.add_argument("--pass-env", action="append", default=[], metavar="NAME",
                   help="pass this variable of your environment into every host (repeatable; "
                        "nothing else of your environment reaches a host)")
    p.add_argument("--host-order", metavar="HOST,HOST,...",
                   help="order of each instance group's hosts in resourceconfig.json, e.g. algo-2,algo-1 "
                        "(default: sorted lexicographically, as SageMaker documents)")
    p.add_argument("--smddp-strict", action="store_true",
                   help="the SMDDP stand-in refuses what it only infers SMDDP does not support (default: warns)")
    p.add_argument("--wait-on-rendezvous-errors", action="store_true",
                   help="leave a job whose rendezvous cannot complete (duplicate ranks, world sizes or masters "
                        "that differ, a missing rank) waiting, as SageMaker does (default: name the error and "
                        "stop the job as Failed)")


def _channels(args: argparse.Namespace) -> dict[str, Any]:
    plain: dict[str, Any] = dict(_kv(args.channel, "--channel"))
    sharded = _kv(args.sharded_channel, "--sharded-channel")
    for name, folder in sharded.items():
        if name in plain:
            raise RequestError(f"InputDataConfig.{name}", "given as --channel and --sharded-channel",
                               allowed="one of them per channel")
        plain[name] = {"path": folder, "distribution": "ShardedByS3Key"}
    return plain


def _request(args: argparse.Namespace) -> Any:
    from .job import request as rq

    return rq.create(
        entry_point=args.entry_point, source_dir=args.source_dir, instance_count=args.hosts,
        instance_type=args.instance_type, gpus_per_host=args.gpus_per_host,
        distribution=_json(args.distribution, "distribution", dict),
        hyperparameters=_json(args.hyperparameters, "HyperParameters", dict),
        channels=_channels(args), environment=_kv(args.env, "--env"),
        output_path=args.output_dir, max_run=args.max_run, job_name=args.job_name,
        checkpoint_dir=args.checkpoint_dir, checkpoint_local_path=args.checkpoint_local_path, image_uri=args.image,
        pytorchddp_encoding=args.pytorchddp_encoding,
        forward_aws_credentials=args.forward_aws_credentials,
        short_toolkit_sleeps=args.short_toolkit_sleeps, fast_start=args.fast_start, pass_env=args.pass_env,
        host_order=None if args.host_order is None else [h.strip() for h in args.host_order.split(",")],
        smddp_strict=args.smddp_strict, wait_on_rendezvous_errors=args.wait_on_rendezvous_errors,
        framework_version=args.framework_version, py_version=args.py_version,
        profile=args.profile, gpu_memory=args.gpu_memory, gpu_memory_gib=args.gpu_memory_gib,
        metric_definitions=[{"Name": k, "Regex": v}
                            for k, v in _kv(args.metric_definition, "--metric-definition").items()] or None)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m emulator",
                                description="Run SageMaker training jobs on emulated hosts algo-1..N.")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a job; exit 0 iff it Completed")
    _job_flags(run)
    run.add_argument("--stop-grace", type=float, default=STOP_GRACE,
                     help="seconds between SIGTERM and SIGKILL when the job is stopped (SageMaker: 120)")
    run.add_argument("--keep-hosts", action="store_true",
                     help="keep each host's /opt/ml tree, and the hosts still running at the end (frozen) "
                          "for `shell` and `ps` until `reap`")
    run.add_argument("--fault", action="append", default=[], metavar="SPEC",
                     help="inject a fault, e.g. kill:algo-2:SIGKILL@5s, freeze:algo-2@log=/epoch 2/, spot@10s "
                          "(see emulator/diagnostics/faults.py)")
    run.add_argument("--quiet", action="store_true", help="no live host logs, only the summary")
    plan = sub.add_parser("plan", help="print the plan and the launch spec (exactly what run, or replay of SOURCE, "
                                       "starts); start nothing", description=PLAN_FORMS)
    _job_flags(plan)
    reap = sub.add_parser("reap", help="remove kept hosts, and what emulator processes that are gone left behind")
    reap.add_argument("job_dir", metavar="JOB_DIR", nargs="?",
                      help="only this job: its kept hosts, and what a killed run of it left")
    launch = sub.add_parser("launch", help="run a SageMaker SDK launcher script against the emulator")
    launch.add_argument("script")
    launch.add_argument("args", nargs=argparse.REMAINDER)
    # -- timeline --
    timeline = sub.add_parser("timeline", help="draw JOB_DIR/timeline.png again from JOB_DIR/timeline.json")
    timeline.add_argument("job_dir", metavar="JOB_DIR")
    # -- end timeline --
    # -- shell, ps (emulator/kept/shell.py) --
    shell = sub.add_parser("shell", help="enter a kept host (--keep-hosts): a shell, or run CMD and exit with "
                                         "its status")
    shell.add_argument("job_dir", metavar="JOB_DIR")
    shell.add_argument("host", metavar="HOST", help="e.g. algo-2")
    shell.add_argument("cmd", metavar="-- CMD", nargs=argparse.REMAINDER, help="command to run instead of a shell")
    ps = sub.add_parser("ps", help="list the processes of each kept host of JOB_DIR (without it: the kept jobs)")
    ps.add_argument("job_dir", metavar="JOB_DIR", nargs="?")
    ps.add_argument("hosts", metavar="HOST", nargs="*", help="only these hosts")
    # -- end shell, ps --
    doctor = sub.add_parser("doctor", help="which backends can run here, and the fix where one cannot "
                                           "(exit 0 iff at least one can)")
    doctor.add_argument("--json", action="store_true", help="the checks as JSON")
    cache = sub.add_parser("cache", help="list what the emulator keeps here (layers, environments, images), "
                                         "or prune what is not in use (cache --help)", add_help=False)
    cache.add_argument("args", nargs=argparse.REMAINDER, help="[list] | prune [--older-than DURATION] [--all]")
    replay = sub.add_parser("replay", help="run a recorded SageMaker job (DescribeTrainingJob JSON, job.json, or a "
                                           "job name) again; exit 0 iff it ends as recorded (replay --help)",
                            add_help=False)
    replay.add_argument("args", nargs=argparse.REMAINDER, help="SOURCE [--source-dir DIR_OR_TAR] [--channel NAME=PATH]"
                        " [--sample N] [--hosts N] [--plan] [--emit-pytest FILE [--expect fix|recorded]] …")
    return p


def error_exit(exc: EmulatorError) -> int:
    """Print ``exc``; the exit status: 2 for a refused request, 3 for any other emulator error."""
    print(f"error: {exc}", file=sys.stderr)
    return 2 if isinstance(exc, RequestError) else 3


def terminate_on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM (how CI runners and ``timeout`` cancel a job) is handled like Ctrl-C, once."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated()


def plan_document(request: Any, backend_name: str) -> dict[str, Any]:
    """What ``plan`` prints: the request, the plan, and the launch spec ``run`` would start."""
    from pathlib import Path

    from .backends import get_backend
    from .preflight import check as preflight
    from .supervisor import launch_plan

    backend = get_backend(backend_name)
    preflight(request, backend)
    job_plan, spec = launch_plan(request, backend, caller_env=dict(os.environ), job_id=f"{request.job_name}-<id>",
                                 scratch=Path(tempfile.gettempdir()) / f"{scratch_prefix(request.job_name)}<id>"
                                 / "backend-0")
    return {**job_plan.to_dict(), "launch": spec.to_dict()}


def _timeline(job_dir: str) -> int:
    """``python -m emulator timeline JOB_DIR``: 0 when drawn, 2 for a bad JOB_DIR, 3
    without matplotlib."""
    from pathlib import Path

    from .diagnostics.timeline import redraw

    try:
        print(redraw(Path(job_dir)))
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ImportError:
        print("error: drawing the timeline needs matplotlib: pip install 'sagemaker-cluster-emulator[plot]'",
              file=sys.stderr)
        return 3
    return 0


def _ended(args: argparse.Namespace) -> str:
    return ("stopped, or kept (`python -m emulator ps` lists kept jobs)" if getattr(args, "keep_hosts", False)
            else "torn down")


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] in (["cache"], ["replay"]) or plans_a_source(given):  # own options and --help
        from .backends import run_tool  # (backends/store.py, replay/command.py)

        try:
            return run_tool(given[0], given[1:])
        except RequestError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    args = parser().parse_args(given)
    previous = signal.signal(signal.SIGTERM, terminate_on_sigterm) if args.command in ("run", "launch") else None
    try:
        if args.command == "run":
            from .supervisor import run

            result = run(_request(args), backend=args.backend, stop_grace=args.stop_grace,
                         keep_hosts=args.keep_hosts, echo=not args.quiet, faults=args.fault)
            if args.quiet:
                print(f"{result.job_name}: {result.status}" +
                      (f" — {result.failure_reason}" if result.failure_reason else ""))
                if "KeptHosts" in result.description["Emulator"]:  # processes remain: say so
                    from .kept.records import console, load

                    print("\n".join(console(load(result.job_dir))))
            return 0 if result.ok else 1
        if args.command == "plan":
            json.dump(plan_document(_request(args), args.backend), sys.stdout, indent=2, default=str)
            print()
            return 0
        if args.command == "reap":
            from .kept.reap import reap

            for line in reap(args.job_dir):
                print(line)
            return 0
        if args.command == "shell":
            from .kept.shell import shell

            shell(args.job_dir, args.host, args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd)
        if args.command == "ps":
            from .kept.shell import list_kept, ps_text

            print(ps_text(args.job_dir, args.hosts) if args.job_dir else list_kept())
            return 0
        if args.command == "launch":
            from .sdk.launch import launch

            return launch(args.script, args.args)
        if args.command == "timeline":
            return _timeline(args.job_dir)
        if args.command == "doctor":
            from .backends import run_tool

            return run_tool("doctor", ["--json"] if args.json else [])
    except EmulatorError as exc:
        return error_exit(exc)
    except Terminated:
        print(f"terminated (SIGTERM): the job was stopped and its hosts {_ended(args)}", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print(f"interrupted: the job was stopped and its hosts {_ended(args)}", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0
