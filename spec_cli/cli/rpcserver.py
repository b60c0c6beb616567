"""`spec-cli rpc-server`: llama.cpp's RPC server from this very build, so a
second machine needs the same `pip install` and nothing else, and the
protocol versions always match."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import SpecError
from .common import check_port


def rpc_server(
    host: Annotated[str, typer.Option("--host", help="Address to listen on (loopback by default; see the "
                                                      "warning for any other).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", min=1, max=65535, help="Port to listen on.")] = 50052,
    threads: Annotated[int, typer.Option("--threads", min=0, help="CPU threads (0 = the cores other programs "
                                                                   "leave free).")] = 0,
    cache: Annotated[Optional[str], typer.Option(
        "--cache", metavar="DIR", help="Keep the tensors clients send in DIR, so that the next load of the "
                                       "same model reads them from disk instead of the network.")] = None,
) -> None:
    """Lend this machine's memory and compute to a spec-cli elsewhere: its
    --rpc HOST:PORT spreads a target's layers over such servers.

    \b
    Examples:
      spec-cli rpc-server                      # on this machine, for a client here
      spec-cli rpc-server --host 10.0.0.5 --cache ~/.cache/spec-cli/rpc   # on a private network
      ssh -L 50052:127.0.0.1:50052 gpu-box     # or keep it on loopback and tunnel to it
    """
    import os
    import sys

    from ..llama import cores, rpc
    from ..serve.access import is_loopback
    from ..term import render

    rpc.require()
    if not is_loopback(host):
        render.note(f"warning: listening on {host}:{port} with no authentication: anyone who can reach this "
                    "port gets this machine's memory and compute, and can read what clients send. Keep it on "
                    "a private network or a VPN, or listen on 127.0.0.1 and reach it through an SSH tunnel "
                    f"(ssh -L {port}:127.0.0.1:{port} THIS-HOST).")
    if cache:
        os.makedirs(os.path.expanduser(cache), exist_ok=True)
    check_port(host, port)
    n = cores.threads(threads)
    render.note(f"spec-cli rpc-server on {host}:{port}, {n} threads; clients: --rpc {host}:{port}. Ctrl-C stops")
    sys.stdout.flush()
    try:
        rpc.serve(host, port, threads=n, cache=os.path.expanduser(cache) if cache else None)
    except KeyboardInterrupt:
        pass
    raise SpecError(f"the RPC server on {host}:{port} stopped", hint="Is the port free? Run again.")
