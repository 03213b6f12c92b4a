"""Every rank (or the single process of a plain job) writes what it can see of itself to /opt/ml/model.

Used by tests/jobs/test_profiles_equivalence.py: the same job in the ``exact`` and ``ci`` profiles must
give the same dumps except for the listed differences (PIDs, timings, torchrun's run id). Written
at the script's very start, before anything but the standard library is imported: what a script
sees before its own imports is what fast start must get right. ``--fail`` makes rank 1 raise after
its dump (the failure text is compared too); ``--lightning`` runs a two-step Lightning DDP fit
after the dump and records what the fit saw.
"""
import json
import os
import resource
import signal
import socket
import sys


def status_fields():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("Umask", "Uid", "Gid", "Groups", "NoNewPrivs", "Seccomp", "CapInh", "CapPrm", "CapEff",
                       "CapBnd", "CapAmb", "SigBlk", "SigIgn", "SigCgt", "Cpus_allowed_list",
                       "Speculation_Store_Bypass"):
                out[key] = value.strip()
    return out


def proc_list(path):
    with open(path, "rb") as f:
        return [item.decode(errors="replace") for item in f.read().split(b"\0")[:-1]]


def tree(root):
    """Every file under ``root``: relative path -> size (the contents of the config files too)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if rel.startswith("model/") or rel.startswith("output/data/") or rel.startswith("code/__pycache__"):
                continue  # written by the ranks themselves while the job runs
            try:
                out[rel] = os.path.getsize(path)
                if rel.startswith("input/config/"):
                    with open(path) as f:
                        out[rel] = f.read()
            except OSError as exc:
                out[rel] = f"unreadable: {exc}"
    return out


def stdio(stream):
    if stream is None:
        return None
    return {"encoding": stream.encoding, "errors": stream.errors, "line_buffering": stream.line_buffering,
            "write_through": getattr(stream, "write_through", None), "name": getattr(stream, "name", None),
            "mode": getattr(stream, "mode", None), "buffer": type(getattr(stream, "buffer", None)).__name__,
            "isatty": stream.isatty()}


rank = os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
pid = os.getpid()
report = {
    "env": dict(os.environ),
    "proc_environ": sorted(proc_list("/proc/self/environ")),
    "argv": sys.argv,
    "orig_argv": sys.orig_argv,
    "cmdline": proc_list("/proc/self/cmdline"),
    "executable": sys.executable,
    "path": sys.path,
    "flags": list(sys.flags),
    "dont_write_bytecode": sys.dont_write_bytecode,
    "hostname": socket.gethostname(),
    "resolves": {h: socket.gethostbyname(h) for h in json.loads(os.environ.get("SM_HOSTS", "[]"))},
    "cwd": os.getcwd(),
    "opt_ml": tree("/opt/ml"),
    "status": status_fields(),
    "limits": {name: resource.getrlimit(getattr(resource, name)) for name in sorted(dir(resource))
               if name.startswith("RLIMIT_")},
    "nice": os.getpriority(os.PRIO_PROCESS, 0),
    "affinity": sorted(os.sched_getaffinity(0)),
    "session_leader": os.getsid(0) == pid,
    "group_leader": os.getpgid(0) == pid,
    "pid_is_1": pid == 1,
    "signals": {str(s): repr(signal.getsignal(s)) for s in range(1, signal.NSIG)
                if s not in (signal.SIGKILL, signal.SIGSTOP, 32, 33)},
    "stdio": {name: stdio(getattr(sys, name)) for name in ("stdin", "stdout", "stderr")},
    "main": {k: repr(v) for k, v in sorted(vars(sys.modules["__main__"]).items())
             if k in ("__name__", "__file__", "__package__", "__spec__", "__cached__", "__doc__")},
    "main_loader": type(getattr(sys.modules["__main__"], "__loader__", None)).__name__,
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "recursion_limit": sys.getrecursionlimit(),
    "umask_check": os.umask(0o022),
}
os.umask(report["umask_check"])

import torch  # noqa: E402  (after the dump: what torch itself then reports)

report["torch"] = {"threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
                   "cuda": torch.cuda.is_available(), "devices": torch.cuda.device_count(),
                   "version": torch.__version__, "config_parallel": torch.__config__.parallel_info().splitlines()[:6]}
with open(f"/opt/ml/model/dump-{socket.gethostname()}-{rank}.json", "w") as f:
    json.dump(report, f, sort_keys=True, default=repr)

if "--lightning" in sys.argv:
    import pytorch_lightning as pl

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    trainer = pl.Trainer(accelerator="gpu", devices=local, num_nodes=int(os.environ.get("WORLD_SIZE", "1")) // local,
                         strategy="ddp", max_steps=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))
    seen = {"global_rank": trainer.global_rank, "world_size": trainer.world_size, "local_rank": trainer.local_rank,
            "node_rank": trainer.node_rank, "rank_zero_only": pl.utilities.rank_zero_only.rank}
    with open(f"/opt/ml/model/lightning-{socket.gethostname()}-{rank}.json", "w") as f:
        json.dump(seen, f, sort_keys=True)

if "--fail" in sys.argv and rank == "1":
    raise RuntimeError(f"rank {rank} fails on purpose")
