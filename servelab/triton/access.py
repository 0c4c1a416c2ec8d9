"""Who may change what a Triton runs: its model-repository, shared-memory, logging and trace APIs answer only
requests that carry a key drawn when the server starts, and the course's own calls find that key by themselves.

    from servelab.triton import access
    key = access.new_key()
    access.server_args(key)                 # ["--http-restricted-api=model-repository,…:servelab-admin-key=<key>", …]
    access.headers("http://127.0.0.1:8003")  # {"servelab-admin-key": "<key>"}: tritonclient's headers= (or curl -H)
    access.headers("127.0.0.1:8004", grpc=True)   # {"triton-grpc-protocol-servelab-admin-key": "<key>"}
    access.send_key(client, url)             # every call of one tritonclient client (HTTP or gRPC) carries it

Why: a Triton in explicit model-control mode loads what a load request sends, and such a request may carry a
config and a python `model.py` that Triton writes to disk and runs as the user who started it. Triton reads the
body whatever its Content-Type, so a plain `text/plain` POST, which any web page may send to 127.0.0.1 without
asking, is enough. Restricted APIs refuse every request without the header; inference, health, metadata, model
config and statistics stay open (the lessons' clients and perf_analyzer use them).

Where the key lives: one 0600 file per running server, in a 0700 folder of this user in the temporary folder
(`user_dir()`), named after the server's HTTP port and recording its gRPC port, host and pid. `key_for(url)`
reads the file of a running server of this user on that port (reached on loopback or on its own address), else
SERVELAB_TRITON_KEY: the key of a compose stack, which the node bootstrap writes into docker/.env.
Triton takes the key on its command line only, so a user of the same machine can read it in the process list;
what it keeps out is every web page and every other machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from servelab.private_files import open_private, private_folder

# the header Triton checks over HTTP (lower case: gRPC metadata keys are)
HEADER = "servelab-admin-key"
# over gRPC, Triton looks for the same name behind its own prefix (the refusal names it)
GRPC_HEADER = f"triton-grpc-protocol-{HEADER}"
# the APIs a web page or a stranger must not reach: loading code, mapping memory, moving the log and trace files
RESTRICTED = ("model-repository", "shared-memory", "logging", "trace")
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0"})


def new_key() -> str:
    return secrets.token_urlsafe(32)


def server_args(key: str, header: str = HEADER) -> list[str]:
    """tritonserver's own flags restricting RESTRICTED over HTTP and gRPC to requests carrying `header: key`."""
    apis = ",".join(RESTRICTED)
    return [f"--http-restricted-api={apis}:{header}={key}", f"--grpc-restricted-protocol={apis}:{header}={key}"]


def user_dir() -> Path:
    """<tmp>/servelab-<uid>, created 0700 and checked (servelab.private_files): Triton's default log, its trace
    file and the key files live here, so no other user can plant a link there."""
    return private_folder(Path(tempfile.gettempdir()) / f"servelab-{os.getuid()}",
                          fix="remove it, or set TMPDIR to a folder only you can write")


@dataclass(frozen=True)
class KeyRecord:
    """What a running server's key file holds."""
    key: str
    host: str
    http_port: int
    grpc_port: int
    pid: int


def key_path(http_port: int) -> Path:
    return user_dir() / f"triton-{http_port}.key"


def write_key(record: KeyRecord) -> Path:
    """The record, as a 0600 file of this user's folder, replaced in one step (a reader sees the old or the new)."""
    path = key_path(record.http_port)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = open_private(tmp, os.O_WRONLY | os.O_EXCL)
    with os.fdopen(fd, "w") as fh:
        json.dump(asdict(record), fh)
    os.replace(tmp, path)
    return path


def remove_key(http_port: int, key: str | None = None) -> None:
    """Remove the key file of the server on `http_port` (only if it holds `key`, when given)."""
    path = key_path(http_port)
    record = _read(path)
    if record is not None and (key is None or record.key == key):
        path.unlink(missing_ok=True)


def _read(path: Path) -> KeyRecord | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd) as fh:
        st = os.fstat(fh.fileno())
        if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
            return None  # not ours, or readable by others: not a key this user wrote
        try:
            return KeyRecord(**json.load(fh))
        except (ValueError, TypeError):
            return None


def split(url: str) -> tuple[str, int | None]:
    """"http://127.0.0.1:8003/…" or "127.0.0.1:8004" -> ("127.0.0.1", 8003)."""
    hostport = url.strip().split("://", 1)[-1].split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    try:
        return host or hostport, int(port)
    except ValueError:
        return hostport, None


def running_key(url: str) -> str | None:
    """The key of a running server this user started on the URL's port (a file whose server exited is removed)."""
    from servelab.managed_process import pid_alive

    host, port = split(url)
    if port is None:
        return None
    for path in user_dir().glob("triton-*.key"):
        record = _read(path)
        if record is None or port not in (record.http_port, record.grpc_port):
            continue
        if not pid_alive(record.pid):
            path.unlink(missing_ok=True)
            continue
        if host in LOCAL_HOSTS or host == record.host:
            return record.key
    return None


def key_for(url: str, key: str | None = None) -> str | None:
    """The key to send to the Triton at `url`: `key` when given, else a running server's key file for that port,
    else SERVELAB_TRITON_KEY (a compose stack's, from docker/.env); None when there is none."""
    if key:
        return key
    found = running_key(url)
    if found:
        return found
    from servelab.config import Settings

    return Settings.from_env().triton_key


def headers(url: str, key: str | None = None, *, grpc: bool = False) -> dict[str, str]:
    """{HEADER: key} for tritonclient's `headers=` ({GRPC_HEADER: key} for its gRPC client); empty when no key is
    known for `url`."""
    found = key_for(url, key)
    return {GRPC_HEADER if grpc else HEADER: found} if found else {}


def send_key(client, url: str, key: str | None = None) -> None:
    """Make every call of a tritonclient client (HTTP or gRPC) carry the key for `url`, through tritonclient's own
    plugin hook; nothing is attached when no key is known (the server then answers restricted calls with 403)."""
    found = key_for(url, key)
    if found:
        grpc = type(client).__module__.startswith("tritonclient.grpc")
        client.register_plugin(_key_plugin(GRPC_HEADER if grpc else HEADER, found))


def _key_plugin(header: str, key: str):
    from tritonclient.http import InferenceServerClientPlugin

    class KeyHeader(InferenceServerClientPlugin):
        def __call__(self, request):
            request.headers[header] = key

    return KeyHeader()


def refusal_hint(message: str) -> str:
    """A sentence to add when Triton refused a call for want of the key (its own message names the header)."""
    if "restricted" in message.lower() or HEADER in message:
        return (f" — this call needs the header {HEADER} (gRPC: {GRPC_HEADER}): the key of the server's start (servelab finds it for a "
                "server you started; for a compose stack set SERVELAB_TRITON_KEY from docker/.env; "
                "`servelab triton key` prints it)")
    return ""
