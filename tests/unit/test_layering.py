"""Layers and seams of ``emulator/``.

Every backend behind one interface: no module outside ``emulator/backends/`` imports a backend's
own module (only ``emulator.backends`` and ``emulator.backends.base``), touches a backend's private,
or branches on a backend's name (what a backend can do is a capability flag of ``Backend``).

No import cycles between modules, and no import that climbs a layer (:data:`LAYERS`), counting
every import: at the top, inside functions and under ``TYPE_CHECKING``. The in-host code counts
too: its modules import each other by bare names (``import _sm_emulator_cuda``), since their
folders are on the hosts' ``PYTHONPATH`` (:data:`HOST_PATH`), and those names are resolved to its files.

Read from the source with :mod:`ast`, so a comment or a docstring that names a backend is fine.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

from emulator.backends import BACKENDS
from emulator.inhost import SITE, SMDDP_SITE

ROOT = Path(__file__).resolve().parents[2] / "emulator"
ALLOWED = {"emulator.backends", "emulator.backends.base"}
#: The in-host folders on a host's ``PYTHONPATH`` (relative to ``emulator/``): a module in one of
#: them imports the others' modules by their bare names.
HOST_PATH = tuple(p.relative_to(ROOT) for p in (SITE, SMDDP_SITE))


def _modules() -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.py"))
            if "backends" not in p.relative_to(ROOT).parts and "inhost" not in p.relative_to(ROOT).parts]


def _imported(path: Path, node: ast.ImportFrom | ast.Import, root: Path = ROOT) -> list[str]:
    """The absolute module names an import statement of ``path`` names (and its imported names).
    In the in-host code (:data:`HOST_PATH`), a bare name of a module there is that module's
    ``emulator.`` name (``_sm_emulator_cuda`` -> ``emulator.inhost.site._sm_emulator_cuda``)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        package = ".".join(("emulator", *path.relative_to(root).parts[:-1]))
        base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
        module = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
        names = [module, *(f"{module}.{a.name}" for a in node.names)]
    if not any(path.is_relative_to(root / folder) for folder in HOST_PATH):
        return names
    return [_on_host_path(name, root) if (isinstance(node, ast.Import) or not node.level) else name for name in names]


def _on_host_path(name: str, root: Path) -> str:
    """``name`` as an in-host module imports it, resolved along :data:`HOST_PATH` (unchanged if
    it is no module there: ``os``, ``torch``)."""
    top = name.split(".")[0]
    for folder in HOST_PATH:
        if (root / folder / f"{top}.py").is_file() or (root / folder / top / "__init__.py").is_file():
            return ".".join(("emulator", *folder.parts, name))
    return name


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


#: The layers, lowest first: a module may import its own layer and those below, never one above.
#: ``inhost`` (the code that runs inside the hosts, and the protocol both sides share) is below all.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"inhost", "errors", "mpi_output", "console", "cache", "progress"}),
    frozenset({"job"}),
    frozenset({"backends"}),
    frozenset({"observers", "diagnostics"}),
    frozenset({"kept", "preflight", "description", "summary"}),
    frozenset({"supervisor"}),
    frozenset({"sdk"}),
    frozenset({"cli", "replay", "__main__", ""}),
)


def _name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(["emulator", *(parts[:-1] if parts[-1] == "__init__" else parts)])


def _graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Every module of ``emulator/`` (the in-host code included) and the modules of ``emulator/``
    it imports, wherever the import statement is."""
    paths = {_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in paths}
    for module, path in paths.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[module] |= {n for n in _imported(path, node, root) if n in paths and n != module}
    return graph


def _cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    return next(i for i, layer in enumerate(LAYERS) if top in layer)


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_no_import_climbs_a_layer() -> None:
    graph = _graph()
    climbs = [f"{m} (layer {_layer(m)}) imports {n} (layer {_layer(n)})"
              for m, names in sorted(graph.items()) for n in sorted(names) if _layer(n) > _layer(m)]
    assert climbs == []


def test_every_module_has_a_layer() -> None:
    assert [m for m in _graph() if not any((m.split(".")[1] if "." in m else "") in layer for layer in LAYERS)] == []


def test_the_graph_checks_see_what_they_forbid() -> None:
    """Positive control: a two-module cycle, a lazy import and a climb are all seen."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    graph = _graph()
    assert "emulator.job.request" in graph["emulator.supervisor"]  # a top-level import
    assert "emulator.supervisor" in graph["emulator.cli"]  # an import inside a function
    assert _layer("emulator.backends.base") > _layer("emulator.job.plan")
    site = "emulator.inhost.site."
    assert f"{site}_sm_emulator_cuda" in graph[f"{site}_sm_emulator_torch"]  # in-host: `import _sm_emulator_cuda`
    assert f"{site}_sm_emulator_torch" in graph[f"{site}_sm_emulator_hooks"]  # in-host, inside a function
    assert f"{site}_sm_emulator_names" in graph[f"{site}_sm_emulator_patches"]  # `from ._sm_emulator_names import`
    smddp = "emulator.inhost.smddp.site.smdistributed.dataparallel.torch."
    assert f"{smddp}_emulated_backend" in graph[f"{smddp}distributed"]  # `from smdistributed... import`
    assert f"{site}_sm_emulator_log" in graph[f"{smddp}_emulated_backend"]  # across the two host folders


def test_the_graph_checks_see_an_inhost_cycle(tmp_path: Path) -> None:
    """Positive control: a cycle planted among in-host modules that import each other by bare
    names (one import inside a function, one ``from ... import``) is found; the names of modules
    that are not on the hosts' path (``os``) are not in the graph."""
    site = tmp_path / HOST_PATH[0]
    site.mkdir(parents=True)
    (site / "_sm_emulator_a.py").write_text("import os\n\n\ndef f():\n    import _sm_emulator_b\n")
    (site / "_sm_emulator_b.py").write_text("from _sm_emulator_a import f\n")
    (site / "_sm_emulator_c.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                            "    import _sm_emulator_a\n")
    prefix = ".".join(("emulator", *HOST_PATH[0].parts)) + "."
    graph = _graph(tmp_path)
    assert graph[f"{prefix}_sm_emulator_c"] == {f"{prefix}_sm_emulator_a"}
    assert _cycles(graph) == [[f"{prefix}_sm_emulator_a", f"{prefix}_sm_emulator_b"]]
