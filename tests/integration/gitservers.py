"""Real git plumbing for the source tests: repositories driven through the git CLI, a smart-HTTP server
(``git http-backend`` behind HTTP Basic auth) and an ``sshd``, all on 127.0.0.1 and all stopped by the tests.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO, cast
from urllib.parse import unquote

import pytest

SSHD = Path("/usr/sbin/sshd")


def git_env(**extra: str) -> dict[str, str]:
    """The environment for the tests' own git commands: none of the caller's GIT_* variables (a pre-commit
    hook exports some), no user or system config, a fixed identity."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="Ada Author",
        GIT_AUTHOR_EMAIL="ada@example.org",
        GIT_COMMITTER_NAME="Cy Committer",
        GIT_COMMITTER_EMAIL="cy@example.org",
    )
    env.update(extra)
    return env


def git(cwd: Path, *args: str, **env: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=git_env(**env), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed in {cwd}: {done.stderr}")
    return done.stdout.strip()


class Repo:
    """A repository with a work tree, driven through the git CLI."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def init(cls, path: Path) -> Repo:
        path.mkdir(parents=True)
        git(path, "init", "-q", "-b", "main")
        return cls(path)

    @classmethod
    def clone(cls, url: str | Path, path: Path) -> Repo:
        git(path.parent, "clone", "-q", str(url), str(path))
        return cls(path)

    def git(self, *args: str, **env: str) -> str:
        return git(self.path, *args, **env)

    def write(self, files: dict[str, str | None]) -> None:
        for name, text in files.items():
            target = self.path / name
            if text is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)

    def commit(self, message: str, files: dict[str, str | None] | None = None, date: str | None = None) -> str:
        """Write ``files`` (None deletes), commit everything, return the new sha."""
        self.write(files or {})
        self.git("add", "-A")
        env = {"GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date} if date else {}
        self.git("commit", "-q", "--allow-empty", "-m", message, **env)
        return self.head()

    def head(self, rev: str = "HEAD") -> str:
        return self.git("rev-parse", f"{rev}^{{commit}}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- smart HTTP ---------------------------------------------------------------------------------------------


class GitHttpServer:
    """``git http-backend`` as CGI behind a threaded HTTP server on 127.0.0.1 that wants HTTP Basic auth
    with ``token`` as the password (any user name, recorded in ``users``)."""

    def __init__(self, project_root: Path, token: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.project_root = project_root
        self.token = token
        self.users: list[str] = []
        self.denied = 0
        self.backend = str(Path(git(project_root, "--exec-path")) / "git-http-backend")
        self._server = ThreadingHTTPServer((host, port), _CgiHandler)
        self._server.daemon_threads = True
        cast(Any, self._server).git = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> GitHttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _CgiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the response ends when the connection closes: stream without a length

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._cgi()

    def do_POST(self) -> None:
        self._cgi()

    def _authorized(self, srv: GitHttpServer) -> bool:
        scheme, _, value = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(value).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        srv.users.append(user)
        return password == srv.token

    def _cgi(self) -> None:
        srv: GitHttpServer = cast(Any, self.server).git
        if not self._authorized(srv):
            srv.denied += 1
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(srv.project_root),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_PROJECT_ROOT": str(srv.project_root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": unquote(path),
            "REQUEST_METHOD": self.command,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "REMOTE_USER": "tester",
            "REMOTE_ADDR": self.client_address[0],
            "SERVER_PROTOCOL": "HTTP/1.0",
            "GATEWAY_INTERFACE": "CGI/1.1",
        }
        for header in ("Git-Protocol", "Content-Encoding"):
            if self.headers.get(header):
                env["HTTP_" + header.upper().replace("-", "_")] = self.headers[header]
        chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"
        length = int(self.headers.get("Content-Length") or 0)
        if not chunked:
            env["CONTENT_LENGTH"] = str(length)
        proc = subprocess.Popen([srv.backend], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env)
        assert proc.stdin is not None and proc.stdout is not None
        feeder = threading.Thread(target=self._feed, args=(proc.stdin, chunked, length), daemon=True)
        feeder.start()
        status, reason, headers = 200, "OK", []
        while True:
            line = proc.stdout.readline().decode("latin-1").rstrip("\r\n")
            if not line:
                break
            name, _, value = line.partition(":")
            if name.lower() == "status":
                code, _, reason = value.strip().partition(" ")
                status = int(code)
            else:
                headers.append((name.strip(), value.strip()))
        self.send_response(status, reason or None)
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        shutil.copyfileobj(proc.stdout, self.wfile)
        proc.wait()
        feeder.join(timeout=5)

    def _feed(self, stdin: BinaryIO, chunked: bool, length: int) -> None:
        try:
            if chunked:
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        break
                    stdin.write(self.rfile.read(size))
                    self.rfile.readline()
            else:
                remaining = length
                while remaining > 0:
                    chunk = self.rfile.read(min(remaining, 65536))
                    if not chunk:
                        break
                    stdin.write(chunk)
                    remaining -= len(chunk)
        except BrokenPipeError:
            pass
        finally:
            with contextlib.suppress(BrokenPipeError):
                stdin.close()


# -- sshd ---------------------------------------------------------------------------------------------------


def require_sshd() -> None:
    """Skip (fail under CI=true) when openssh-server is not installed."""
    if SSHD.exists() and shutil.which("ssh") and shutil.which("ssh-keygen"):
        return
    reason = f"{SSHD} (Debian package openssh-server) or the ssh client is not installed"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI must install openssh-server", pytrace=False)
    pytest.skip(reason)


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)], check=True,
                   stdin=subprocess.DEVNULL)
    return path


class SshServer:
    """A real sshd on a free 127.0.0.1 port, with its own host key, accepting ``client_key`` for the current
    user; git-upload-pack is found on sshd's default PATH."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.host_key = keygen(workdir / "host_key")
        self.client_key = keygen(workdir / "client_key")
        (workdir / "authorized_keys").write_text((workdir / "client_key.pub").read_text())
        self.port = free_port()
        self.log = workdir / "sshd.log"
        self.config = workdir / "sshd_config"
        self.config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {self.host_key}",
                    f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
                    f"PidFile {workdir / 'sshd.pid'}",
                    "StrictModes no",
                    "UsePAM no",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PubkeyAuthentication yes",
                    "PermitRootLogin prohibit-password",
                    "LogLevel VERBOSE",
                ]
            )
            + "\n"
        )
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def known_hosts_line(self) -> str:
        keytype, key = (self.workdir / "host_key.pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {keytype} {key}\n"

    def url(self, path: Path) -> str:
        return f"ssh://{_user()}@127.0.0.1:{self.port}{path}"

    def start(self) -> SshServer:
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        with self.log.open("wb") as log:
            self._proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(self.config)], stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise AssertionError(f"sshd exited: {self.log.read_text()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                if s.recv(4).startswith(b"SSH-"):
                    return self
            time.sleep(0.02)
        self.stop()
        raise AssertionError(f"sshd did not come up: {self.log.read_text()}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


@contextlib.contextmanager
def running(server: GitHttpServer | SshServer) -> Iterator[Any]:
    server.start()
    try:
        yield server
    finally:
        server.stop()
