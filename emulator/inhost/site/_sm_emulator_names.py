"""The names the emulator and its in-host code share that start-up code reads: no imports at all.

Part of the host protocol (``_sm_emulator_protocol`` re-exports every name here; read them from
there unless the module runs at every interpreter start, where importing the protocol's
``dataclasses`` would cost ~15 ms: ``sitecustomize``, ``_sm_emulator_exits``, ``_sm_emulator_stacks``).
Add a name here or in the protocol rather than writing its literal in a second place.
"""

#: The prefix of every variable below (the plan never copies a caller's value of one into a host).
ENV_PREFIX = "EMULATOR_"

# -- variables the emulator sets in every host (read by the in-host code) ---------------------
#: "1" in every emulated host: activates ``sitecustomize``'s lazy patches.
ENV_INHOST = "EMULATOR_INHOST"
#: Emulated GPUs on this host, their model name and memory (bytes per device).
ENV_GPU_COUNT = "EMULATOR_GPU_COUNT"
ENV_GPU_MODEL = "EMULATOR_GPU_MODEL"
ENV_GPU_MEMORY = "EMULATOR_GPU_MEMORY"
#: "count": emulated GPUs count the memory they would hold (_sm_emulator_memory); unset or "off": they do not.
ENV_GPU_MEMORY_MODE = "EMULATOR_GPU_MEMORY_MODE"
#: In-host folder where ranks write diagnostics records (bind-mounted from the job's scratch).
ENV_DIAG_DIR = "EMULATOR_DIAG_DIR"
#: "1": cap the toolkit's fixed MPI-family sleeps (a recorded deviation).
ENV_SHORT_TOOLKIT_SLEEPS = "EMULATOR_SHORT_TOOLKIT_SLEEPS"
#: "1": the toolkit reads torch's version from torch/version.py instead of importing torch (a recorded deviation).
ENV_TOOLKIT_SKIPS_TORCH_IMPORT = "EMULATOR_TOOLKIT_SKIPS_TORCH_IMPORT"
#: "1": fork torchrun and its ranks from a pre-imported interpreter (a recorded deviation).
ENV_FAST_START = "EMULATOR_FAST_START"
#: Modules the fast-start interpreter imports ahead (comma separated).
ENV_FAST_START_PRELOAD = "EMULATOR_FAST_START_PRELOAD"
#: "1": the smdistributed stand-in turns inferred limits into errors (default: warnings).
ENV_SMDDP_STRICT = "EMULATOR_SMDDP_STRICT"
#: "0": ranks do not record the collectives they issue (default: recorded; see DIAG_* below).
ENV_COLLECTIVES = "EMULATOR_COLLECTIVES"

#: Files ranks write in ``EMULATOR_DIAG_DIR`` (``<prefix><hostname>-<pid><suffix>``): the stack
#: dump each Python process appends to on :data:`STACKS_SIGNAL`, the collective ring (binary,
#: mmap'd) with its JSON side file, and the record of an exception that ended a process or thread.
STACKS_PREFIX = "stacks-"
COLLECTIVES_PREFIX = "coll-"
EXIT_PREFIX = "exit-"
#: What a process asked ``init_process_group`` for, written before it blocks in the rendezvous
#: (``rdzv-<host>-<pid>.json``; see ``_sm_emulator_rendezvous`` and ``emulator.diagnostics.rendezvous``).
RDZV_PREFIX = "rdzv-"
#: Written by every Python process of a host once its main script (and its non-daemon threads) has
#: ended: a JSON header line (then, only where the ``fatal-`` file below is not the handler's, what
#: ``faulthandler`` dumps if a fatal signal ends the process during interpreter exit; see
#: ``_sm_emulator_exits``, ``emulator.diagnostics.exitdeaths``).
ENDED_PREFIX = "ended-"
#: Where every Python process of a host points ``faulthandler`` for its whole life, unless it (or
#: ``PYTHONFAULTHANDLER``/``-X faulthandler``) enabled it itself: a header line, then what
#: ``faulthandler`` dumps when SIGSEGV/SIGABRT/SIGBUS/SIGFPE/SIGILL ends the process; the file's
#: mtime is then the time of death (``_sm_emulator_exits``, ``emulator.diagnostics.firstdeath``).
FATAL_PREFIX = "fatal-"
#: The signal every Python process of a host registers ``faulthandler`` on at start (SIGRTMIN+23,
#: i.e. SIGRTMAX-7 on Linux): a real-time signal nothing else in the stack uses. Its default action
#: terminates, so the emulator sends it only to processes whose ``SigCgt`` shows a handler AND
#: that wrote a stacks file (see ``emulator.diagnostics.stacks``).
STACKS_SIGNAL = 57
#: The DLC the job stands for ("the PyTorch 2.2.0 DLC"): named by a rank's hint when an import
#: fails with ModuleNotFoundError (``_sm_emulator_exits``).
ENV_DLC = "EMULATOR_DLC"
#: What the DLC ships that the emulator does not install here: a JSON object, top-level module ->
#: why (``emulator.job.dlc.NOT_INSTALLABLE``); a rank's hint for such a module names the emulator's gap.
ENV_DLC_GAPS = "EMULATOR_DLC_GAPS"
#: The DLC's torch release ("1.12.1"; unset for ``current``): a critical patch that does not fit
#: a different installed torch names the replacement (``_sm_emulator_patches``).
ENV_DLC_TORCH = "EMULATOR_DLC_TORCH"

# -- the modules the in-host hooks watch (in-host only: the emulator's side reads the patch registry) --
# Here, not in ``_sm_emulator_hooks``, so the modules that patch them read them without importing
# the hooks (which import those modules: an import cycle). Each is the set of modules of its patch
# registry group (``_sm_emulator_patches``; tests/jobs/test_patch_registry.py keeps them equal).
#: Lightning modules (2.x ``lightning``/``pytorch_lightning``/``lightning_fabric``, and 1.5's
#: ``plugins.training_type``) whose DDP classes pick CUDA device ids (registry: ``lightning-ddp``).
LIGHTNING_DDP_MODULES = (
    "pytorch_lightning.strategies.ddp",
    "pytorch_lightning.plugins.training_type.ddp",
    "pytorch_lightning.plugins.training_type.ddp_spawn",
    "lightning.pytorch.strategies.ddp",
    "lightning.fabric.strategies.ddp",
    "lightning_fabric.strategies.ddp",
)
#: FSDP modules whose device choice is adjusted for emulated GPUs (registry: ``cuda-fsdp``): FSDP v1's
#: module, its ``_init_utils``, and FSDP2's ``_fsdp_init`` (``_sm_emulator_devices`` tells them apart
#: by position).
FSDP_MODULES = ("torch.distributed.fsdp.fully_sharded_data_parallel", "torch.distributed.fsdp._init_utils",
                "torch.distributed.fsdp._fully_shard._fsdp_init", "torch.distributed.fsdp._flat_param")
#: The toolkit modules whose sleeps ``EMULATOR_SHORT_TOOLKIT_SLEEPS=1`` caps (registry: ``short-sleeps``).
TOOLKIT_SLEEP_MODULES = ("sagemaker_training.mpi", "sagemaker_training.smdataparallel")
#: The toolkit module whose torch import ``EMULATOR_TOOLKIT_SKIPS_TORCH_IMPORT=1`` avoids
#: (registry: ``toolkit-torch-version``).
TOOLKIT_TRAINING_MODULE = "sagemaker_pytorch_container.training"
