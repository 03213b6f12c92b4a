"""Describe the Python packages each SageMaker PyTorch / Hugging Face training DLC installs.

Reads AWS's own build files in a checkout (bare or not) of ``aws/deep-learning-containers`` as
*data* (nothing of AWS's is copied or run, no docker build) and writes
``emulator/job/dlc_images.json``. Standard library only.

Usage (from the repository root; ``python tools/dlc_describe ...`` does the same)::

    python -m tools.dlc_describe --repo /path/to/deep-learning-containers \\
        [--legacy <commit>] [--current <commit>] [--sdk-huggingface-json PATH] \\
        [--out emulator/job/dlc_images.json]

Modules: :mod:`.gitrepo` (reading the mirror), :mod:`.shell` (``RUN`` shell words), :mod:`.requirements` (one
install argument or conda spec as a requirement), :mod:`.installs` (install/uninstall commands -> events ->
packages), :mod:`.dockerfile` (instructions, stages, ``ARG``/``ENV``), :mod:`.buildspec` (AWS's YAML),
:mod:`.markers` (PEP 508 markers), :mod:`.uvlock` (``uv.lock``), :mod:`.images` (one image record, the report),
:mod:`.pytorch`, :mod:`.huggingface` (finding the images), :mod:`.generate` (the JSON and the command line).

What is read, and the rules
===========================

PyTorch 1.12 - 2.10 (``--legacy`` commit, AWS's ``master``)
    * ``pytorch/training/buildspec*.yml`` (x86 only) name, per ``short_version`` and device, the
      images built with ``target: sagemaker`` and their ``docker_file``. Only files named exactly
      ``Dockerfile.cpu`` / ``Dockerfile.gpu`` count (Training Compiler, "lite", neuron and arm64
      images are other products). Several GPU images for one version (2.0: cu118 and cu121): the
      one carrying ``latest_release_tag`` (the one AWS still patches), then the highest CUDA. A
      device whose block is commented out at that commit (2.0 CPU) is looked up in the history of
      that version's buildspec files (newest commit that names it); its Dockerfile is still read at
      ``--legacy``.
    * In the Dockerfile only the stages the target is built from count: ``sagemaker`` and the stages
      it is ``FROM`` (``common``, ``base_image``) or copies ``--from``; never ``ec2``. An external
      base image (2.7+ GPU: ``deep-learning-containers/base``) is not followed.
    * Docker semantics as BuildKit applies them: ``\\`` continuations (trailing blanks allowed),
      comment and blank lines inside a continuation dropped, global ``ARG`` defaults visible in a
      stage only when re-declared there, ``ARG``/``ENV`` inherited by stages built ``FROM`` a stage,
      build arguments overriding ``ARG`` defaults.
    * ``RUN`` lines are read like a POSIX shell: quotes, ``${VAR}``/``$VAR`` (ARG, ENV and variables
      set earlier in the same ``RUN``), ``&&``/``||``/``;``/``|``, ``if/then/else/fi`` (every branch
      counts), redirections (an unquoted ``jinja2>=3.1.6`` is ``jinja2`` with its output sent to a
      file named ``=3.1.6``, so it installs ``jinja2`` unpinned), shell comments.
    * Counted, in order: ``pip install`` (also ``pip3``, ``python -m pip``, ``uv pip``, global
      options before the sub-command), ``python setup.py install`` of a ``git clone``-d tree,
      ``conda``/``mamba install`` (and ``update`` of named packages), ``pip uninstall`` /
      ``conda remove`` (a later install adds the package back). ``pip wheel`` only builds; a later
      install of that wheel by glob takes its requirement.
    * A requirement is, in this order: a wheel URL or file (name and exact version from the file
      name, ``%2B`` decoded: ``torch-2.5.1%2Bcu124-...whl`` -> ``torch==2.5.1+cu124``); a VCS URL
      or a local tree (the distribution from :data:`.requirements.SOURCE_TREES`, e.g. ``NVIDIA/TransformerEngine``
      -> ``transformer-engine``); else a PEP 508 requirement. ``version`` is set only for an exact
      pin (``==X`` without ``*``, ``===X``, a wheel file name, a conda ``name=X.Y.Z`` pin).
    * Conda names are mapped to PyPI distribution names by :data:`.requirements.CONDA_TO_PYPI` (else the name
      itself, PEP 503 normalised); conda packages that install no Python distribution are skipped,
      each with its reason in :data:`.requirements.CONDA_SKIP` (``python``, ``curl``, ``libcurl``, ``libgcc``,
      ``mkl``, ``mkl-include``, ``cmake``, ``ninja``, CUDA and magma packages, metapackages, and
      ``typing``). A conda ``name=X.Y.Z`` pin becomes ``name==X.Y.Z``; ``name=X.Y`` becomes
      ``name==X.Y.*``.
    * A package installed several times keeps one entry: the requirement and ``via`` of the last
      install, and the line numbers (in the Dockerfile) of every install since it was last
      uninstalled. ``uninstalled`` lists names uninstalled and not installed again afterwards.
    * ``python``: the ``PYTHON_VERSION`` global ARG as written; ``cuda``: the version in the root
      stage's ``FROM`` image (``nvidia/cuda:12.4.1-...`` or ``.../base:12.9.1-gpu-...``), else the
      ``CUDA_VERSION`` ARG; ``framework_version``: the buildspec's ``version``.

PyTorch 2.11+ (``--current`` commit, AWS's ``main``)
    * ``.github/config/image/pytorch/<v>-sagemaker-{cpu,cuda}.yml`` give the Dockerfile, its target
      (``sagemaker``) and the ``build:`` block that AWS's CI passes as ``--build-arg`` (keys upper
      cased) plus ``FRAMEWORK_SHORT_VERSION``.
    * The target's stages are read as above: ``uv sync`` commands say which extras are installed
      (``--extra sagemaker``) from the ``pyproject.toml``/``uv.lock`` the stage ``COPY``-ies; other
      installs (``transformer-engine[pytorch]``, ``flash-attn`` in ``Dockerfile.cuda``'s builder
      stages, copied into the runtime with ``COPY --from``) are counted like pip installs.
    * Packages: the lock's entry for the project itself (``source = { virtual = "." }``): its
      ``dependencies`` plus ``optional-dependencies`` of the synced extras. Where the lock holds
      several versions of one name (``torch 2.13.0`` and ``2.13.0+cpu``) the project's dependency
      entries carry ``version`` and a PEP 508 ``marker``; the one whose marker holds on Linux x86_64
      (CPython, the image's Python) is taken: ``2.13.0+cpu`` (the plain ``2.13.0`` is macOS arm64's); a
      dependency without ``version`` takes the entry whose ``resolution-markers`` hold.
      ``requirement`` is ``name==locked-version``, ``via`` ``uv``, ``lines`` ``[]``. ``source.path`` is
      the Dockerfile (the ``lines`` of its own installs point there); the lock is
      ``docker/pytorch/<family>/{cpu,cuda}/uv.lock``. ``python``/``cuda`` as above, with the config's
      build arguments applied (``PYTHON_VERSION``, ``CUDA_VERSION``).

Hugging Face (``--legacy`` commit)
    * The versions are the SageMaker Python SDK's ``image_uri_config/huggingface.json``
      ``training`` entries with a PyTorch 1.12+ framework (older ones have no PyTorch image here).
    * For each (transformers, torch) pair the image is found in
      ``huggingface/pytorch/training/buildspec*.yml`` (``transformers_version``,
      ``datasets_version``, ``docker_file``; AWS's builder passes the first two as build arguments)
      or, failing that, a ``Dockerfile.gpu`` whose ``ARG TRANSFORMERS_VERSION`` default and ``FROM``
      tag match. If neither exists at ``--legacy``, the history of that folder is searched
      (``git log -S``) and the newest commit whose files still have that version is described (the
      parent of the commit that replaced it). Not found: left out and reported.
    * Only what the HF Dockerfile itself installs/uninstalls is listed; ``base`` is the id of the
      PyTorch image of the same torch ``major.minor`` (GPU) and ``base_tag`` its ``FROM`` tag;
      ``framework_version`` is the torch of that tag. ``python``/``cuda`` are the base image's when the
      tag's CUDA folder is the one described for ``base``, else those of the PyTorch Dockerfile of the
      tag's folder (4.28.1 is ``FROM`` 2.0.0 cu118 while ``pytorch-2.0-gpu`` is 2.0.1 cu121).

Every image also has
    * ``date``: ISO 8601 UTC (``2025-07-21T16:37:14Z``) committer date of the newest commit, at or before
      ``source.commit``, that changed a file the image's description was read from
      (``git log -1 --format=%cI <commit> -- <paths>``, converted to UTC): the Dockerfile; for 2.11+ also
      that version's ``pyproject.toml``, ``uv.lock`` and ``.github/config/image/pytorch/<v>-sagemaker-*.yml``;
      for Hugging Face the HF Dockerfile and the buildspec that names it (when found by one). Meant as pip's
      ``--uploaded-prior-to``: unpinned requirements resolved as they were when AWS last built the image.
    * ``locked``: for 2.11+, ``{canonical name: version}`` of every ``uv.lock`` entry the image's ``uv sync``
      installs: the transitive closure of the project's ``dependencies`` and its synced extras'
      (``sagemaker``), following each entry's ``dependencies`` whose ``marker`` holds on Linux x86_64
      CPython with the image's Python (:mod:`.markers`) and the extras a dependency names
      (``{ name = "x", extra = ["y"] }`` -> ``x``'s ``optional-dependencies.y``); a name locked twice is
      resolved as for ``packages`` (``torch`` ``2.13.0+cpu`` in the CPU lock). The project itself and dev
      groups are left out. Every ``via: uv`` package is in it at the same version; the Dockerfile's own
      pip installs (``flash-attn``, ``transformer-engine``) are not. ``null`` for the other images.

The script prints the images, the images and Hugging Face versions it could not find, its notes
(unresolved shell words, history look-ups, mismatches) and every conda name it skipped, with why.
"""

