"""A loopback TCP proxy that holds each direction's bytes for D ms: a slow
network for measuring what speculation buys as it slows (this kernel has
no netem).

    python tools/latency_proxy.py --listen 127.0.0.1:60052 --to 127.0.0.1:50052 --delay-ms 1

Every chunk read from one side is written to the other D ms after it was
read, in order; the bandwidth is loopback's.  A round trip through it costs
2 D more.  Ctrl-C stops it.  Several pairs: repeat --listen/--to.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import time


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    queue: asyncio.Queue = asyncio.Queue()

    async def deliver():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            queue.put_nowait((time.monotonic() + delay, data))
    except (ConnectionError, OSError):
        pass
    finally:
        queue.put_nowait((0.0, None))
        try:
            await sender
        except (ConnectionError, OSError):
            pass


def _hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def _serve(listen: str, to: str, delay: float) -> asyncio.AbstractServer:
    up_host, up_port = _hostport(to)

    async def handle(reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection(up_host, up_port)
        except OSError:
            writer.close()
            return
        for sock in (writer.get_extra_info("socket"), up_writer.get_extra_info("socket")):
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(_pump(reader, up_writer, delay), _pump(up_reader, writer, delay))

    host, port = _hostport(listen)
    return await asyncio.start_server(handle, host, port)


async def main_async(pairs: list[tuple[str, str]], delay_ms: float) -> None:
    servers = [await _serve(listen, to, delay_ms / 1e3) for listen, to in pairs]
    for (listen, to) in pairs:
        print(f"{listen} -> {to}, {delay_ms:g} ms each way", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", action="append", required=True, help="HOST:PORT to listen on")
    ap.add_argument("--to", action="append", required=True, help="HOST:PORT to forward to")
    ap.add_argument("--delay-ms", type=float, default=1.0, help="one-way delay added, ms")
    args = ap.parse_args()
    if len(args.listen) != len(args.to):
        ap.error("give one --to for each --listen")
    try:
        asyncio.run(main_async(list(zip(args.listen, args.to)), args.delay_ms))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
