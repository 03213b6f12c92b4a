"""Every backend behind one interface: no module outside ``emulator/backends/`` imports a backend's
own module (only ``emulator.backends`` and ``emulator.backends.base``), touches a backend's private,
or branches on a backend's name (what a backend can do is a capability flag of ``Backend``).

Read from the source with :mod:`ast`, so a comment or a docstring that names a backend is fine.
"""

from __future__ import annotations

import ast
from pathlib import Path

from emulator.backends import BACKENDS

ROOT = Path(__file__).resolve().parents[1] / "emulator"
#: The docker backend's own helpers that still live beside the core (image builds and probes,
#: helper containers, the wheelhouse): they run the docker engine by design.
DOCKER_OWN = {"helpers.py", "images.py", "wheelhouse.py", "_wheelhouse_resolver.py", "engine.py"}
ALLOWED = {"emulator.backends", "emulator.backends.base"}


def _modules() -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.py"))
            if "backends" not in p.relative_to(ROOT).parts and "inhost" not in p.relative_to(ROOT).parts
            and p.name not in DOCKER_OWN]


def _imported(path: Path, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The absolute module names an import statement of ``path`` names (and its imported names)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    package = ".".join(("emulator", *path.relative_to(ROOT).parts[:-1]))
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    module = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
    return [module, *(f"{module}.{a.name}" for a in node.names)]


def test_no_module_outside_the_backends_imports_a_backends_own_module() -> None:
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = _imported(path, node)
                module = names[0] if isinstance(node, ast.ImportFrom) else None
                for name in names if module is None else [module]:
                    if name.startswith("emulator.backends.") and name not in ALLOWED:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: imports {name}")
                if module in ALLOWED:  # from emulator.backends import docker / from .backends import process
                    found += [f"{path.relative_to(ROOT)}:{node.lineno}: imports {module}.{a.name}"
                              for a in node.names if a.name in BACKENDS or a.name.startswith("_")]
    assert found == []


def test_no_module_outside_the_backends_branches_on_a_backends_name() -> None:
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                parts = [node.left, *node.comparators]
                names = [p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)]
                about_backend = any("backend" in ast.unparse(p).lower() for p in parts)
                if about_backend and (set(names) & set(BACKENDS) or any(isinstance(p, (ast.Set, ast.Tuple, ast.List))
                                                                        for p in parts)):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_the_checks_see_what_they_forbid(tmp_path: Path) -> None:
    """Positive control: the forms the two checks reject are recognised."""
    tree = ast.parse('if job.backend == "docker":\n    from .backends import docker\n')
    compare = next(n for n in ast.walk(tree) if isinstance(n, ast.Compare))
    assert "backend" in ast.unparse(compare.left) and compare.comparators[0].value in BACKENDS  # type: ignore[attr-defined]
    fake = ROOT / "kept.py"
    imp = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert _imported(fake, imp)[0] == "emulator.backends" and imp.names[0].name in BACKENDS
