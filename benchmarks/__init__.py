"""Benchmarks of the emulator: overhead against a hand-started ``torchrun``, scaling, docker.

``python -m benchmarks.run [--quick] [--reps N] [--out DIR]`` (or ``nox -s bench``) measures every
case side by side in one run and writes ``bench-results/results.json``, ``results.md`` and
``scaling.png``. Each measured job runs in its own worker process (:mod:`benchmarks.worker`) so
that the emulator's own CPU time (``RUSAGE_SELF``) and the hosts' CPU time (``RUSAGE_CHILDREN``)
are not mixed with the benchmark's sampler (:mod:`benchmarks.sampler`), which runs here.
"""
