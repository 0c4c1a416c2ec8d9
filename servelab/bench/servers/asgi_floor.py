"""The floor under any Python HTTP service: a bare ASGI app that reads a request's whole body and answers a
response the size of one embedding (512 float32, 2,048 bytes), and nothing else.

    python -m uvicorn servelab.bench.servers.asgi_floor:app --port 8010 --no-access-log

What uvicorn (the same server, the same HTTP parser) costs per request before any framework, routing,
validation, batching or model runs. A service can approach this figure, never pass it: `servelab bench
frontend` reports the service's requests per second as a share of it.
"""

from __future__ import annotations

ANSWER = bytes(2048)  # one 512-d float32 embedding
_HEADERS = [(b"content-type", b"application/octet-stream"), (b"content-length", str(len(ANSWER)).encode())]


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    more = True
    while more:  # the whole body, as a service must read it
        message = await receive()
        if message["type"] != "http.request":
            return
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": ANSWER})
