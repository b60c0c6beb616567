"""llama.cpp's RPC backend: a target spread over `ggml-rpc-server`s on
other machines, through ggml's own calls (nothing of the protocol is
re-implemented but its greeting, checked here first).

  * `check(endpoint)`: before llama.cpp touches an endpoint, connect with a
    timeout and exchange the protocol's HELLO: a dead endpoint, a port that
    speaks something else, or another protocol version is a SpecError
    naming it (llama.cpp's own client would end the process with
    GGML_ABORT instead);
  * `add_servers(endpoints)`: register them (what `--rpc` does in
    llama.cpp's common/arg.cpp: ggml_backend_rpc_add_server, then
    ggml_backend_register) and return their devices, for
    llama_model_params.devices; `local_devices()` is every other device, so
    a draft model stays on this machine;
  * `serve(...)`: this build's own RPC server (ggml_backend_rpc_start_server,
    exported by libggml-rpc): `spec-cli rpc-server`;
  * `on_abort(hook)`: a server that dies mid-run makes ggml abort; the hook
    runs first (one line for the user, the chat's history written out),
    then the process exits with EXIT_RPC instead of dumping core.
"""

from __future__ import annotations

import ctypes
import functools
import os
import socket
import struct
import sys
from pathlib import Path

from ..errors import SpecError

PROTO_MAJOR, PROTO_MINOR = 7, 0   # ggml-rpc.h of the vendored llama.cpp (RPC_PROTO_*_VERSION)
CMD_HELLO = 14                    # RPC_CMD_HELLO ("must be always 14")
CAPS = 24                         # RPC_CONN_CAPS_SIZE: the transport's capabilities (zeros: plain TCP)
CONNECT_S = 5.0
EXIT_RPC = 3                      # the exit code after an RPC server went away mid-run
REBUILD = ('CMAKE_ARGS="-DGGML_RPC=ON" pip install --force-reinstall --no-cache-dir --no-deps '
           "llama-cpp-python==0.3.36")


def parse(spec: str | None) -> tuple[str, ...]:
    """'host:port,host:port' -> the endpoints, each checked for shape."""
    if not spec:
        return ()
    out = []
    for part in spec.split(","):
        part = part.strip()
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SpecError(f"bad RPC endpoint {part!r}", hint="Give HOST:PORT, several separated by commas, "
                                                               "e.g. --rpc 192.168.1.20:50052,192.168.1.21:50052.")
        out.append(f"{host.strip('[]')}:{int(port)}")
    if len(set(out)) != len(out):
        raise SpecError(f"an RPC endpoint is given twice: {spec}")
    return tuple(out)


def check(endpoint: str, timeout: float = CONNECT_S) -> str:
    """Greet `endpoint` as llama.cpp's client would; its protocol version,
    or a SpecError saying what is wrong there."""
    host, _, port = endpoint.rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except socket.timeout:
        raise SpecError(f"RPC server {endpoint} did not answer within {timeout:g} s",
                        hint="Is it reachable from here (firewall, tunnel)? A server serves one client at a "
                             "time: is another spec-cli or llama.cpp using it?") from None
    except OSError as e:
        raise SpecError(f"cannot reach RPC server {endpoint}: {e.strerror or e}",
                        hint="Start it there with: spec-cli rpc-server --host ADDRESS --port PORT") from None
    with sock:
        sock.settimeout(timeout)
        try:
            sock.sendall(struct.pack("<BQ", CMD_HELLO, CAPS) + bytes(CAPS))
            size = struct.unpack("<Q", _recv(sock, 8))[0]
            if size != 4 + CAPS:
                raise ValueError(size)
            major, minor, patch = _recv(sock, size)[:3]
        except socket.timeout:
            raise SpecError(f"RPC server {endpoint} did not answer within {timeout:g} s",
                            hint="A server serves one client at a time: is another spec-cli or llama.cpp "
                                 "using it? Else it may not be an RPC server.") from None
        except (OSError, ValueError, struct.error):
            raise SpecError(f"{endpoint} does not speak llama.cpp's RPC protocol",
                            hint="Is that the right port? spec-cli rpc-server (or ggml-rpc-server) listens "
                                 "on 50052 by default.") from None
    if major != PROTO_MAJOR or minor > PROTO_MINOR:
        raise SpecError(f"RPC server {endpoint} speaks protocol {major}.{minor}.{patch}; this build speaks "
                        f"{PROTO_MAJOR}.{PROTO_MINOR}",
                        hint="Run the same spec-cli and llama-cpp-python there (spec-cli rpc-server).")
    return f"{major}.{minor}.{patch}"


def unreachable(endpoints: tuple[str, ...], timeout: float = 1.0) -> list[str]:
    """Those of `endpoints` that refuse a connection now (which one died).
    Only a connection is tried: a live server is busy with this process
    (it serves one client at a time) and would not answer a greeting."""
    out = []
    for ep in endpoints:
        host, _, port = ep.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
        except OSError:
            out.append(ep)
    return out


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        got = sock.recv(n - len(data))
        if not got:
            raise ValueError("closed")
        data += got
    return data


# -- ggml's calls ---------------------------------------------------------------

_libs: dict[str, ctypes.CDLL] = {}


def _lib(name: str) -> ctypes.CDLL:
    """One of llama-cpp-python's shared libraries, loaded once (RTLD_GLOBAL:
    the same ggml llama.cpp uses)."""
    if name not in _libs:
        from .lib import llama_cpp  # loads libllama and the ggml it links

        folder = Path(llama_cpp.__file__).resolve().parent / "lib"
        for candidate in (f"lib{name}.so", f"lib{name}.dylib", f"{name}.dll"):
            if (folder / candidate).exists():
                _libs[name] = ctypes.CDLL(str(folder / candidate), mode=ctypes.RTLD_GLOBAL)
                break
        else:
            raise SpecError(f"this llama-cpp-python build has no {name} library", hint=f"Rebuild it: {REBUILD}")
    return _libs[name]


def supported() -> bool:
    from .lib import llama_cpp

    return bool(llama_cpp.llama_supports_rpc())


def require() -> None:
    if not supported():
        raise SpecError("this llama-cpp-python was built without llama.cpp's RPC backend",
                        hint=f"Rebuild it with RPC: {REBUILD}")


@functools.cache
def _ggml() -> ctypes.CDLL:
    """libggml with the signatures used here (set once)."""
    g = _lib("ggml")
    g.ggml_backend_register.argtypes = [ctypes.c_void_p]
    g.ggml_backend_register.restype = None
    g.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
    g.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
    g.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    g.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
    g.ggml_backend_dev_count.argtypes = []
    g.ggml_backend_dev_count.restype = ctypes.c_size_t
    g.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    g.ggml_backend_dev_get.restype = ctypes.c_void_p
    g.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]
    g.ggml_backend_dev_name.restype = ctypes.c_char_p
    g.ggml_backend_dev_description.argtypes = [ctypes.c_void_p]
    g.ggml_backend_dev_description.restype = ctypes.c_char_p
    g.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    g.ggml_backend_dev_type.restype = ctypes.c_int
    return g


@functools.cache
def _rpc() -> ctypes.CDLL:
    """libggml-rpc with the signatures used here (set once)."""
    r = _lib("ggml-rpc")
    r.ggml_backend_rpc_add_server.argtypes = [ctypes.c_char_p]
    r.ggml_backend_rpc_add_server.restype = ctypes.c_void_p
    r.ggml_backend_rpc_start_server.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                                ctypes.c_size_t, ctypes.c_void_p]
    r.ggml_backend_rpc_start_server.restype = None
    return r


_added: dict[str, list[int]] = {}   # endpoint -> its devices, registered once per process


def add_servers(endpoints: tuple[str, ...]) -> list[int]:
    """Each endpoint not registered yet checked, then registered with ggml;
    all their devices, in order."""
    require()
    for ep in endpoints:
        if ep not in _added:
            check(ep)
    g, r = _ggml(), _rpc()
    devices = []
    for ep in endpoints:
        if ep not in _added:
            reg = r.ggml_backend_rpc_add_server(ep.encode())
            if not reg:
                raise SpecError(f"llama.cpp could not add RPC server {ep}")
            g.ggml_backend_register(reg)
            _added[ep] = [g.ggml_backend_reg_dev_get(reg, i) for i in range(g.ggml_backend_reg_dev_count(reg))]
        devices += _added[ep]
    return devices


def registered() -> bool:
    """Whether RPC servers were registered in this process."""
    return bool(_added)


CPU = 0  # GGML_BACKEND_DEVICE_TYPE_CPU


def _devices() -> list[int]:
    """Every device ggml knows in this process (the RPC servers' once registered)."""
    g = _ggml()
    return [g.ggml_backend_dev_get(i) for i in range(g.ggml_backend_dev_count())]


def local_devices() -> list[int]:
    """Every device but the RPC servers' (GPUs and accelerators here; the
    CPU is never in llama_model_params.devices: layers not offloaded stay on it)."""
    remote = {d for devs in _added.values() for d in devs}
    return [d for d in _devices() if d not in remote and _ggml().ggml_backend_dev_type(d) != CPU]


def device_array(devices: list[int]):
    """A NULL-terminated ggml_backend_dev_t array (keep it alive while the
    model loads)."""
    return (ctypes.c_void_p * (len(devices) + 1))(*devices, None)


def describe(device: int) -> str:
    g = _ggml()
    return f"{g.ggml_backend_dev_name(device).decode()} ({g.ggml_backend_dev_description(device).decode()})"


def serve(host: str, port: int, *, threads: int, cache: str | None) -> None:
    """llama.cpp's RPC server on host:port with this machine's devices (the
    CPU where there is nothing else); returns only when the process ends."""
    require()
    devs = local_devices() or [d for d in _devices() if _ggml().ggml_backend_dev_type(d) == CPU][:1]
    arr = device_array(devs)
    _rpc().ggml_backend_rpc_start_server(f"{host}:{port}".encode(), cache.encode() if cache else None,
                                    threads, len(devs), arr)


_hooks: list = []
_callback = None


def on_abort(hook) -> None:
    """Run `hook(message)` if ggml aborts (an RPC server went away), then
    exit with EXIT_RPC: one line, not a core dump."""
    global _callback
    _hooks.append(hook)
    if _callback is not None:
        return
    g = _ggml()
    CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p)

    def aborted(message: bytes) -> None:
        text = message.decode(errors="replace") if message else ""
        try:
            for h in list(_hooks):
                h(text)
        finally:
            sys.stderr.flush()
            os._exit(EXIT_RPC)

    _callback = CB(aborted)
    g.ggml_set_abort_callback.argtypes = [CB]
    g.ggml_set_abort_callback.restype = ctypes.c_void_p
    g.ggml_set_abort_callback(_callback)
