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
#: ended: a JSON header line, then what ``faulthandler`` dumps if a fatal signal ends the process
#: during interpreter exit (``_sm_emulator_exits``, ``emulator.diagnostics.exitdeaths``).
ENDED_PREFIX = "ended-"
#: The signal every Python process of a host registers ``faulthandler`` on at start (SIGRTMIN+23,
#: i.e. SIGRTMAX-7 on Linux): a real-time signal nothing else in the stack uses. Its default action
#: terminates, so the emulator sends it only to processes whose ``SigCgt`` shows a handler AND
#: that wrote a stacks file (see ``emulator.diagnostics.stacks``).
STACKS_SIGNAL = 57
#: The DLC the job stands for ("the PyTorch 2.2.0 DLC"): named by a rank's hint when an import
#: fails with ModuleNotFoundError (``_sm_emulator_exits``).
ENV_DLC = "EMULATOR_DLC"
#: The DLC's torch release ("1.12.1"; unset for ``current``): a critical patch that does not fit
#: a different installed torch names the replacement (``_sm_emulator_patches``).
ENV_DLC_TORCH = "EMULATOR_DLC_TORCH"
