"""The admission gate in front of the app: an embedding request is refused or admitted before FastAPI sees it.

    app.add_middleware(Gate, svc=svc, routes={"/embed": route, ...})

A plain ASGI middleware, so a refusal costs as little as it can: no routing, no dependencies solved, no `Request`,
no exception handler, and no byte of the body read; a small JSON body (`{"error": {"code", "message"}}`) and its
`Retry-After` go straight to the server. Past capacity most requests are refusals, and what they do not spend is
left to the engine. An admitted request holds its slot (`servelab.service.admission.Admission`) until the app has
answered it or failed, and the route reads in `scope[WAIT_BOUND]` whether the wait budget binds it.
"""

from __future__ import annotations

import json

from servelab.service.errors import ApiError, shed

# the scope key the route reads: True when the time bound admitted the request, so the wait budget binds it
WAIT_BOUND = "servelab.wait_bound"


class Gate:
    """Refuse (503 + Retry-After) or admit each POST to `routes` (path → route) before the app runs; the refusal
    names its route in the scope, as routing would, so the service's metrics count it under the route's template.
    `svc` gives `check_ready()`, `admission` and `metrics`."""

    def __init__(self, app, svc, routes: dict):
        self.app, self.svc, self.routes = app, svc, routes

    async def __call__(self, scope, receive, send):
        route = self.routes.get(route_path(scope)) if scope["type"] == "http" and scope["method"] == "POST" else None
        if route is None:
            return await self.app(scope, receive, send)
        svc, gate = self.svc, self.svc.admission
        try:
            svc.check_ready()
            why = gate.refusal()
            if why:
                shed("overloaded", why, retry_after_s=gate.refused())
        except ApiError as refusal:
            scope["route"] = route
            svc.metrics.rejections.labels(refusal.code).inc()
            return await answer(refusal, send)
        scope[WAIT_BOUND] = gate.enter()
        try:
            await self.app(scope, receive, send)
        finally:
            gate.leave()


async def answer(refusal: ApiError, send) -> None:
    """The refusal as the app's own error answers look (FastAPI's JSONResponse renders them the same way)."""
    body = json.dumps(refusal.body(), ensure_ascii=False, separators=(",", ":")).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               *((k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in refusal.headers.items())]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def route_path(scope) -> str:
    """The path the router matches: without the root path a proxy mounted the app under."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path
