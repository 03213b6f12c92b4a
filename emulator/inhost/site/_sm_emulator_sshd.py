"""``sshd`` stand-in for hosts that cannot run OpenSSH's ``sshd`` (process backend, emulator not root).

An unprivileged user namespace denies ``setgroups``, so the real ``sshd`` can neither switch to its
privilege-separation user nor log anyone in. In such hosts the process backend bind-mounts a
two-line wrapper over ``/usr/sbin/sshd`` that runs this program (``emulator/backends/process/sshd.py``), so
the SageMaker toolkit's ``subprocess.Popen(["/usr/sbin/sshd", "-D"])`` starts it unchanged. It
speaks real SSH (paramiko, server side) on port 22 of the host's own network namespace; the
mapped root of the job's user namespace may bind port 22 there. Everything that talks to ``sshd``
then runs unchanged: the toolkit's paramiko ``_can_connect`` probe, OpenSSH's ``ssh`` client (the
toolkit's ``ssh HOST touch /tmp/done.algo-1`` and Open MPI's default ``plm_rsh_agent``), and any
copy of those functions (the SDK v3 MPI driver's ``mpi_utils.py``).

Emulated, as OpenSSH 9.2's ``sshd`` with ``UsePAM yes`` does it (checked against the real ``sshd``
by ``tests/jobs/test_sshd_standin.py``):

- ``sshd [-D] [-e] [-f CONFIG] [-p PORT]``; without ``-D`` it detaches. From ``sshd_config`` it
  reads ``Port``, ``ListenAddress``, ``HostKey`` and ``AuthorizedKeysFile`` (``%h``, ``%u``,
  ``%%``; relative to the home folder); every other keyword is ignored.
- Public-key authentication only, against that file in the home folder of the account the
  stand-in runs as. User names accepted: that account's (``root`` in the job's namespace) and the
  ``USER``/``LOGNAME`` the stand-in was started with (the emulator's user outside the namespace,
  which paramiko logs in as). Any other name, and any key not in the file, is refused.
- ``session`` channels with ``exec`` (``<login shell> -c COMMAND``, ``argv[0]`` the shell's base
  name) or ``shell`` (the login shell as ``-bash``, reading stdin; no pty). Each command is a new
  session (``setsid``), its cwd the home folder (if that fails: sshd's ``Could not chdir to home
  directory`` message on stderr, and ``/``), stdin/stdout/stderr passed through, its exit status
  sent back. A command killed by a signal sends no status, so ``ssh`` exits 255 as it does after
  OpenSSH's ``exit-signal``. When the client goes away the command is not killed (OpenSSH without
  a pty does not kill it either): its stdin ends and its next write to stdout/stderr fails.
- The environment is built as ``sshd`` + PAM build it: ``USER``, ``LOGNAME``, ``HOME``,
  ``SHELL``, ``PATH`` (sshd's superuser path for uid 0, else its default path), ``TZ`` if the
  stand-in has one; then the PAM environment: ``MOTD_SHOWN=pam`` when ``/etc/pam.d/sshd`` runs
  ``pam_motd``, and every ``envfile`` its ``pam_env`` lines read (default ``/etc/environment``),
  parsed as Linux-PAM 1.5's ``pam_env`` parses them (see :func:`parse_pam_env`), overriding the
  former except ``SSH_CONNECTION*``/``SSH_AUTH_INFO*``; then ``SSH_CLIENT`` and
  ``SSH_CONNECTION``.

Not emulated: PAM itself (no auth/account modules, ``pam_limits``, ``pam_loginuid``,
``pam_keyinit``; ``pam_env.conf`` and ``~/.pam_environment`` are not read), privilege separation
and switching users (every command runs as the stand-in's own user), pseudo-terminals (``pty-req``
is refused, so ``ssh -t`` says "PTY allocation request failed" and goes on without one, and no
``TERM``/``SSH_TTY``), ``AcceptEnv`` (every ``env`` request is refused, as with no ``AcceptEnv``),
X11/agent/port forwarding, subsystems (``sftp``), ``~/.ssh/rc``, ``~/.ssh/environment``,
``authorized_keys`` options (a line with options is not accepted), ``StrictModes`` checks,
password, keyboard-interactive and host-based authentication, ``MaxSessions``/``MaxStartups``,
syslog (only start-up errors are printed, on stderr), utmp/wtmp/lastlog, and OpenSSH's version
string (paramiko's is sent).
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import selectors
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import paramiko
from _sm_emulator_protocol import SSH_PORT, SSHD_CONFIG

#: ``sshd``'s ``PATH`` for uid 0 and for everyone else (Debian's build of OpenSSH).
SUPERUSER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/games"
PAM_SSHD = "/etc/pam.d/sshd"
PAM_ENV_DEFAULT_FILE = "/etc/environment"
#: Linux-PAM 1.5's ``pam_env`` reads each line into a buffer of this many bytes (with the NUL).
PAM_ENV_BUFFER = 8192
#: Variables ``sshd`` never takes from the PAM environment (OpenSSH ``PAM_ENV_BLACKLIST``).
PAM_ENV_DENIED = ("SSH_AUTH_INFO", "SSH_CONNECTION")
_PAM_KEY = re.compile(rb"[A-Za-z0-9_]*\Z")


# -- the login environment ----------------------------------------------------------------------
def _pam_lines(data: bytes) -> Iterator[bytes]:
    """Logical lines as Linux-PAM 1.5's ``_assemble_line`` yields them: blank and comment lines
    skipped, everything from the first ``#`` dropped, a trailing backslash joins the next line.
    Reading stops, as there, at a line that does not fit the buffer, at a last line without a
    newline and at a NUL byte."""
    pieces = data.split(b"\n")
    raw = [p + b"\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
    index = 0
    while True:
        line, used = b"", 0
        while True:
            if used >= PAM_ENV_BUFFER or index >= len(raw):
                return
            piece = raw[index]
            index += 1
            if len(piece) > PAM_ENV_BUFFER - used - 1 or not piece.endswith(b"\n") or piece[:1] == b"\0":
                return
            start = len(piece) - len(piece.lstrip(b" \n\t"))
            text = piece[start:]
            if not text or text[:1] == b"#":
                continue  # nothing on this line
            used += start
            if b"#" in text:
                text = text[:text.index(b"#")]
                yield line + piece[:start] + text
                break
            body = text.rstrip(b" \t\n")
            if body.endswith(b"\\"):
                used += len(body) - 1
                line += piece[:start] + body[:-1]
                continue
            yield line + piece[:start] + text
            break


def parse_pam_env(data: bytes, env: dict[str, str] | None = None) -> dict[str, str]:
    """Apply an ``envfile`` of ``pam_env`` (e.g. ``/etc/environment``) to ``env`` (the PAM
    environment so far), as Linux-PAM 1.5 does: ``[export ]NAME=VALUE``; ``NAME`` only ASCII
    letters, digits and ``_`` (other lines are skipped); a value ends at a newline or ``#``;
    when it starts with a quote, that quote and a quote at its very end are dropped and inner
    quotes kept; a line ``NAME`` alone removes ``NAME``. No ``${VAR}`` expansion (that is
    ``pam_env.conf``'s syntax, not this file's)."""
    env = {} if env is None else env
    for line in _pam_lines(data):
        key = line.lstrip(b" \n\t")
        if key.startswith(b"export "):
            key = key[7:]
        key = re.split(rb"[\n#]", key, maxsplit=1)[0]
        name, sep, value = key.partition(b"=")
        if not name or not _PAM_KEY.match(name):
            continue
        if not sep:
            env.pop(os.fsdecode(name), None)
            continue
        if value[:1] in (b'"', b"'"):
            kept = bytearray()
            for t in range(1, len(value)):
                if value[t] not in b"\"'" or t + 1 < len(value):
                    kept.append(value[t])
            value = bytes(kept)
        env[os.fsdecode(name)] = os.fsdecode(value)
    return env


@dataclass(frozen=True)
class PamSession:
    """What ``/etc/pam.d/sshd``'s session stack contributes to the environment."""

    motd: bool = False  # pam_motd sets MOTD_SHOWN=pam
    envfiles: tuple[str, ...] = (PAM_ENV_DEFAULT_FILE,)


def read_pam_config(text: str | None) -> PamSession:
    """The ``pam_motd`` and ``pam_env`` lines of ``/etc/pam.d/sshd`` (``@include`` files are not
    followed; without the file, ``pam_env``'s default ``/etc/environment`` is read)."""
    if text is None:
        return PamSession()
    motd, files = False, []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) < 3 or words[0] != "session":
            continue
        module, args = os.path.basename(words[2]), words[3:]
        if module == "pam_motd.so":
            motd = True
        elif module == "pam_env.so":
            options = dict(a.split("=", 1) for a in args if "=" in a)
            if options.get("readenv", "1") != "0":
                files.append(options.get("envfile") or PAM_ENV_DEFAULT_FILE)
    return PamSession(motd, tuple(files))


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def login_environment(user: pwd.struct_passwd, pam: PamSession, *, client: tuple[str, int],
                      server: tuple[str, int], tz: str | None = None) -> dict[str, str]:
    """The environment of a command run for ``user`` (see the module docstring)."""
    shell = user.pw_shell or "/bin/sh"
    env = {"USER": user.pw_name, "LOGNAME": user.pw_name, "HOME": user.pw_dir, "SHELL": shell,
           "PATH": SUPERUSER_PATH if user.pw_uid == 0 else DEFAULT_PATH}
    if tz:
        env["TZ"] = tz
    pam_env: dict[str, str] = {"MOTD_SHOWN": "pam"} if pam.motd else {}
    for path in pam.envfiles:
        data = _read(path)
        if data is not None:
            parse_pam_env(data, pam_env)
    env.update({k: v for k, v in pam_env.items() if not k.startswith(PAM_ENV_DENIED)})
    env["SSH_CLIENT"] = f"{client[0]} {client[1]} {server[1]}"
    env["SSH_CONNECTION"] = f"{client[0]} {client[1]} {server[0]} {server[1]}"
    return env


# -- configuration ------------------------------------------------------------------------------
@dataclass
class Config:
    """The ``sshd_config`` keywords the stand-in reads (see the module docstring)."""

    port: int = SSH_PORT
    listen: list[str] = field(default_factory=list)
    host_keys: list[str] = field(default_factory=list)
    authorized_keys: list[str] = field(default_factory=lambda: [".ssh/authorized_keys", ".ssh/authorized_keys2"])


def read_config(text: str, port: int | None = None) -> Config:
    """The keywords of ``sshd_config`` text the stand-in uses (the first ``Port`` and
    ``AuthorizedKeysFile`` win, as in sshd; ``ListenAddress`` and ``HostKey`` add up)."""
    config, seen = Config(), set()
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if len(words) < 2:
            continue
        keyword = words[0].lower()
        if keyword == "listenaddress":
            config.listen.append(words[1])
        elif keyword == "hostkey":
            config.host_keys.append(words[1])
        elif keyword in seen:
            continue
        elif keyword == "port":
            config.port = int(words[1])
        elif keyword == "authorizedkeysfile":
            config.authorized_keys = words[1:]
        seen.add(keyword)
    if port is not None:
        config.port = port
    config.listen = config.listen or ["0.0.0.0"]
    config.host_keys = config.host_keys or [f"/etc/ssh/ssh_host_{kind}_key" for kind in ("rsa", "ecdsa", "ed25519")]
    return config


def authorized_keys(paths: Iterable[str], user: pwd.struct_passwd) -> set[tuple[str, str]]:
    """``(type, base64)`` of every key in the user's ``AuthorizedKeysFile`` files. Lines with
    options (anything before the key type) are skipped: their restrictions are not emulated."""
    keys: set[tuple[str, str]] = set()
    for pattern in paths:
        path = re.sub(r"%([%hu])", lambda m: {"%": "%", "h": user.pw_dir, "u": user.pw_name}[m.group(1)], pattern)
        data = _read(path if os.path.isabs(path) else os.path.join(user.pw_dir, path))
        for line in (data or b"").decode(errors="replace").splitlines():
            words = line.split()
            if len(words) >= 2 and not line.lstrip().startswith("#") and words[0].startswith(
                    ("ssh-", "ecdsa-", "sk-")):
                keys.add((words[0], words[1]))
    return keys


# -- sessions -----------------------------------------------------------------------------------
def _chdir_problem(home: str) -> str | None:
    """Why ``chdir(home)`` would fail (``strerror``), or None."""
    try:
        if not os.path.isdir(home):
            return os.strerror(20 if os.path.exists(home) else 2)  # ENOTDIR / ENOENT
    except OSError as exc:
        return exc.strerror
    return None if os.access(home, os.X_OK) else os.strerror(13)  # EACCES


def _pump(read: Any, write: Any, done: Any) -> None:
    """Copy ``read(n)`` to ``write`` until it returns nothing or either side fails (the client
    went away: the command's stdin ends, its next write to stdout/stderr gets SIGPIPE)."""
    try:
        while data := read(1 << 16):
            write(data)
    except OSError:
        pass
    finally:
        try:
            done()
        except OSError:
            pass


def _write_flushed(sink: Any) -> Any:
    def write(data: bytes) -> None:
        sink.write(data)
        sink.flush()

    return write


def run_session(channel: Any, argv: list[str], shell: str, env: Mapping[str, str], home: str) -> None:
    """Run one command for ``channel`` and report its exit status (see the module docstring)."""
    problem = _chdir_problem(home)
    try:
        proc = subprocess.Popen(argv, executable=shell, env=dict(env), cwd="/" if problem else home,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        channel.sendall_stderr(f"{shell}: {exc.strerror}\n".encode())
        channel.send_exit_status(127 if isinstance(exc, FileNotFoundError) else 126)
        channel.close()
        return
    if problem:
        channel.sendall_stderr(f"Could not chdir to home directory {home}: {problem}\n".encode())
    pumps = [threading.Thread(target=_pump, args=(out.read1, send, out.close), daemon=True)
             for out, send in ((proc.stdout, channel.sendall), (proc.stderr, channel.sendall_stderr))]
    pumps.append(threading.Thread(target=_pump, args=(channel.recv, _write_flushed(proc.stdin), proc.stdin.close),
                                  daemon=True))
    for pump in pumps:
        pump.start()
    code = proc.wait()
    for pump in pumps[:2]:  # all output sent (stdin's pump ends when the channel closes)
        pump.join()
    try:
        if code >= 0:
            channel.send_exit_status(code)
        channel.close()
    except OSError:
        pass


class _Server(paramiko.ServerInterface):  # type: ignore[misc]
    """One connection: key authentication, then session channels."""

    def __init__(self, standin: StandIn, client: tuple[str, int], local: tuple[str, int]) -> None:
        self.standin, self.client, self.local = standin, client, local

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: Any) -> int:
        if username in self.standin.users and (key.get_name(), key.get_base64()) in self.standin.authorized():
            return int(paramiko.AUTH_SUCCESSFUL)
        return int(paramiko.AUTH_FAILED)

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return int(paramiko.OPEN_SUCCEEDED)
        return int(paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED)

    def check_channel_exec_request(self, channel: Any, command: bytes) -> bool:
        self._start(channel, [os.path.basename(self.standin.shell), "-c", os.fsdecode(command)])
        return True

    def check_channel_shell_request(self, channel: Any) -> bool:
        self._start(channel, ["-" + os.path.basename(self.standin.shell)])
        return True

    def _start(self, channel: Any, argv: list[str]) -> None:
        standin = self.standin
        env = login_environment(standin.user, standin.pam, client=self.client, server=self.local,
                                tz=os.environ.get("TZ"))
        threading.Thread(target=run_session, args=(channel, argv, standin.shell, env, standin.user.pw_dir),
                         daemon=True).start()


class StandIn:
    """The listening daemon."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.user = pwd.getpwuid(os.getuid())
        self.shell = self.user.pw_shell or "/bin/sh"
        self.users = {self.user.pw_name, *(os.environ.get(n) for n in ("USER", "LOGNAME") if os.environ.get(n))}
        self.pam = read_pam_config((_read(PAM_SSHD) or b"").decode(errors="replace") if os.path.exists(PAM_SSHD)
                                   else None)
        self.host_keys = [paramiko.PKey.from_path(p) for p in config.host_keys if os.path.exists(p)]
        if not self.host_keys:
            raise SystemExit(f"sshd: no hostkeys available -- exiting. (looked for {', '.join(config.host_keys)})")
        for name in ("paramiko", "paramiko.transport"):  # sshd -D logs to syslog, not to the caller
            logger = logging.getLogger(name)
            logger.addHandler(logging.NullHandler())
            logger.propagate = False

    def authorized(self) -> set[tuple[str, str]]:
        """The authorized keys, read at each login (as sshd does)."""
        return authorized_keys(self.config.authorized_keys, self.user)

    def listen(self) -> list[socket.socket]:
        sockets = []
        for address in self.config.listen:
            host = address.rsplit(":", 1)[0] if address.count(":") == 1 else address
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host.strip("[]"), self.config.port))
            except OSError as exc:
                sock.close()
                print(f"sshd: Bind to port {self.config.port} on {host} failed: {exc.strerror}.", file=sys.stderr)
                continue
            sock.listen(128)
            sockets.append(sock)
        if not sockets:
            raise SystemExit("sshd: Cannot bind any address.")
        return sockets

    def serve(self, sockets: list[socket.socket]) -> None:
        selector = selectors.DefaultSelector()
        for sock in sockets:
            selector.register(sock, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                conn, client = key.fileobj.accept()  # type: ignore[union-attr]
                threading.Thread(target=self.connection, args=(conn, client), daemon=True).start()

    def connection(self, conn: socket.socket, client: Any) -> None:
        transport = paramiko.Transport(conn)
        for key in self.host_keys:
            transport.add_server_key(key)
        local = conn.getsockname()
        try:
            transport.start_server(server=_Server(self, (client[0], client[1]), (local[0], local[1])))
        except (paramiko.SSHException, EOFError, OSError):
            transport.close()


def main(argv: list[str] | None = None) -> int:
    """``sshd [-D] [-e] [-f CONFIG] [-p PORT]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    foreground, config_path, port = False, SSHD_CONFIG, None
    while args:
        arg = args.pop(0)
        if arg == "-D":
            foreground = True
        elif arg == "-e":
            pass  # start-up errors go to stderr anyway; nothing else is logged
        elif arg in ("-f", "-p") and args:
            value = args.pop(0)
            if arg == "-f":
                config_path = value
            else:
                port = int(value)
        else:
            print(f"sshd (emulated, see {__file__}): option {arg!r} is not emulated; "
                  "usage: sshd [-D] [-e] [-f config_file] [-p port]", file=sys.stderr)
            return 1
    try:
        with open(config_path) as f:
            config = read_config(f.read(), port)
    except OSError as exc:
        print(f"sshd: {config_path}: {exc.strerror}", file=sys.stderr)
        return 255
    standin = StandIn(config)
    sockets = standin.listen()
    if not foreground and os.fork() > 0:
        return 0
    if not foreground:
        os.setsid()
    standin.serve(sockets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
