"""One definition of each shared name: no stray copies of the protocol's and the job modules' literals.

The names the emulator and its in-host code share are defined once (``emulator/inhost/site/
_sm_emulator_names.py`` and ``_sm_emulator_protocol.py``, re-exported as ``emulator.inhost.protocol``;
profile names in ``emulator/job/profiles.py``). This reads every module of ``emulator/`` and ``fixtures/``
(their syntax trees: docstrings, comments and help texts may mention a name) and fails on a string
that spells one of them again:

- an ``EMULATOR_*`` variable name (or the bare prefix);
- a SageMaker container path (``/opt/ml...``) used as a path (at the start of a string or after ``:``);
- a profile name (``"exact"``, ``"ci"``);
- the scratch prefix ``sm-emulator-`` on its own;
- a second definition of ``RANK_VARIABLES``/``LOCAL_RANK_VARIABLES``/``SCRATCH_PREFIX``.

The positive control checks that each rule fires on a module written to break it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SITE = "emulator/inhost/site/"
#: Where each kind of literal is defined (paths relative to the repository root).
HOMES = {
    "env": {SITE + "_sm_emulator_names.py"},
    "opt-ml": {SITE + "_sm_emulator_protocol.py"},
    "profile": {"emulator/job/profiles.py"},
    "scratch": {SITE + "_sm_emulator_protocol.py"},
    "definition": {SITE + "_sm_emulator_protocol.py"},
}
ENV = re.compile(r"^EMULATOR_[A-Z0-9_]*$")
OPT_ML = re.compile(r"(^|:)/opt/ml(/|:|$)")
PROFILES = {"exact", "ci"}
SHARED_NAMES = {"RANK_VARIABLES", "LOCAL_RANK_VARIABLES", "SCRATCH_PREFIX"}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _scratch_by_hand(node: ast.JoinedStr) -> bool:
    """An f-string ``"sm-emulator-{...job_name...}..."``: a scratch name built by hand (the docker
    backend's ``sm-emulator-{job_id}`` resource names are another name)."""
    first = node.values[0] if node.values else None
    return isinstance(first, ast.Constant) and str(first.value).startswith("sm-emulator-") and \
        "job_name" in ast.unparse(node)


def strays(source: str, path: str) -> Iterator[str]:
    """``path:line: what`` for every stray literal or second definition in ``source``."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in sorted(ast.walk(tree), key=lambda n: getattr(n, "lineno", 0)):
        if isinstance(node, ast.JoinedStr) and _scratch_by_hand(node) and path not in HOMES["scratch"]:
            yield f"{path}:{node.lineno}: {ast.unparse(node)} (use the protocol's scratch_prefix)"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text, where = node.value, f"{path}:{node.lineno}"
            if ENV.match(text) and path not in HOMES["env"]:
                yield f"{where}: {text!r} (use the protocol's ENV_* name)"
            if OPT_ML.search(text) and path not in HOMES["opt-ml"]:
                yield f"{where}: {text!r} (use the protocol's OPT_ML/CODE_DIR/CHECKPOINT_DIR)"
            if text in PROFILES and path not in HOMES["profile"]:
                yield f"{where}: {text!r} (use profiles.EXACT/profiles.CI)"
            if text == "sm-emulator-" and id(node) not in parts and path not in HOMES["scratch"]:
                yield f"{where}: {text!r} (use the protocol's SCRATCH_PREFIX/scratch_prefix)"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and path not in HOMES["definition"]:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in SHARED_NAMES and \
                        not (isinstance(node.value, ast.Attribute) and node.value.attr == target.id):
                    yield f"{path}:{node.lineno}: {target.id} defined again (import the protocol's)"


def test_no_stray_shared_literals() -> None:
    found = []
    for folder in ("emulator", "fixtures"):
        for file in sorted((ROOT / folder).rglob("*.py")):
            rel = file.relative_to(ROOT).as_posix()
            found += strays(file.read_text(), rel)
    assert not found, "literals defined elsewhere, spelled again:\n" + "\n".join(found)


def test_the_check_finds_strays() -> None:
    """Positive control: one stray of each kind, in a module that is no home of any."""
    bad = '''"""EMULATOR_DIAG_DIR and /opt/ml in a docstring are fine."""
import os
os.environ.get("EMULATOR_DIAG_DIR")
prefix = "EMULATOR_"
code = "/opt/ml/code"
volume = f"{src}:/opt/ml/code:ro"
profile = "exact"
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK")
scratch = "sm-emulator-"
temp = f"sm-emulator-{request.job_name[:20]}-"
help = "folder shipped as /opt/ml/code"
'''
    found = list(strays(bad, "emulator/somewhere.py"))
    assert [line.split(":")[1] for line in found] == ["3", "4", "5", "6", "7", "8", "9", "10"], found
    # The homes themselves, and a re-export under the same name, are not strays.
    assert not list(strays('ENV_DIAG_DIR = "EMULATOR_DIAG_DIR"\n', SITE + "_sm_emulator_names.py"))
    assert not list(strays("SCRATCH_PREFIX = P.SCRATCH_PREFIX\n", "emulator/kept/records.py"))


def _job_request_builders(tree: ast.AST) -> list[str]:
    """The names of the functions of ``tree`` whose code calls ``JobRequest(...)``."""
    return [func.name for func in ast.walk(tree) if isinstance(func, ast.FunctionDef)
            if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "JobRequest"
                   for n in ast.walk(func))]


def test_one_job_request_builder() -> None:
    """A :class:`~emulator.job.request.JobRequest` is built in one place, ``request.from_wire``: the
    estimator-keyword front end (``request.create``) and the SDK's (``sdk.translate``) both call it."""
    builders = {f"{path.relative_to(ROOT)}:{name}"
                for path in sorted((ROOT / "emulator").rglob("*.py"))
                for name in _job_request_builders(ast.parse(path.read_text()))}
    assert builders == {"emulator/job/request.py:from_wire"}
    assert _job_request_builders(ast.parse("def a():\n    return JobRequest(x=1)\n")) == ["a"]  # positive control
