"""Package indexes made in a test: tiny wheels, a PEP 503 "simple" folder, and a loopback server.

The oracles are the formats, not the emulator: a wheel is a zip with ``<name>-<version>.dist-info/``
holding ``METADATA``, ``WHEEL`` and ``RECORD`` (PEP 427, the core metadata spec); a simple index has
one page per project at ``/<normalised name>/`` whose anchors name the files (PEP 503). pip reads both
as it reads PyPI's and download.pytorch.org's (HTML pages: no upload times, as download.pytorch.org).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html
import http.server
import re
import socket
import threading
import urllib.parse
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path


def wheel(folder: Path, name: str, version: str, *, requires: Iterable[str] = ()) -> Path:
    """A pure-Python wheel of ``name`` ``version`` (a module ``name`` saying its version) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"__version__ = {version!r}\n",
        f"{info}/METADATA": "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                                     *(f"Requires-Dist: {r}\n" for r in requires)]),
        f"{info}/WHEEL": ("Wheel-Version: 1.0\nGenerator: tests.simple_index\nRoot-Is-Purelib: true\n"
                          "Tag: py3-none-any\n"),
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}\n")
    record.append(f"{info}/RECORD,,\n")
    out = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)
        whl.writestr(f"{info}/RECORD", "".join(record))
    return out


def simple_folder(root: Path, wheels: Iterable[Path]) -> Path:
    """A PEP 503 index at ``root/simple``: ``/simple/<project>/index.html`` linking each wheel (its
    file name percent-encoded, ``+`` as ``%2B``, as download.pytorch.org writes it), files in ``root/files``."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[str]] = {}
    for whl in wheels:
        (files / whl.name).write_bytes(whl.read_bytes())
        project = re.sub(r"[-_.]+", "-", whl.name.split("-")[0]).lower()
        projects.setdefault(project, []).append(whl.name)
    for project, names in projects.items():
        page = root / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="../../files/{urllib.parse.quote(n)}">{html.escape(n)}</a><br>\n' for n in names)
        (page / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    return root / "simple"


@contextlib.contextmanager
def serve(root: Path) -> Iterator[tuple[str, list[str]]]:
    """``root`` over HTTP on 127.0.0.1 (an ephemeral port) while the block runs: ``(base URL, the
    paths requested so far)``; shut down after."""
    requested: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

        def do_GET(self) -> None:
            requested.append(self.path)
            super().do_GET()

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requested
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connecting is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])
