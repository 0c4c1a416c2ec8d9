"""How the service is launched: one process, or several frontend processes on one port (`servelab serve
--workers N`, SERVELAB_WORKERS, or WEB_CONCURRENCY as platforms set it).

    serve(ServiceConfig(settings))      # one process, or uvicorn's supervisor and settings.workers of them

One event loop reads bodies, answers and batches for every request, and on a fast device it is what limits the
service (servelab bench frontend). uvicorn's own supervisor starts the workers: it binds the socket once and each
worker accepts from it. uvicorn.run() takes workers only with an app named by an import string, which would make
each worker read its settings from the environment alone and lose the command line's; here the configuration
carries the settings (it is sent to each worker), and each worker builds its app from them.

The design: each worker owns its engine, micro-batcher, admission gate and metrics. On a CPU that is N engines,
each on cores ÷ workers threads (given here, unless SERVELAB_THREADS says otherwise) and one instance, so they share
the cores instead of each taking all of them. The emulated accelerator is shared by every process that uses it, so
N workers there stand for N frontends in front of one device. On a GPU each worker's engine would hold its own copy
of the model on the device; one device owner fed by several frontends is another design (Triton's). What each
worker's /metrics and /info say is that worker's alone (a scrape reaches one of them), and the gate's limits hold
per worker.
"""

from __future__ import annotations

import functools
import logging

import uvicorn
from uvicorn.supervisors import Multiprocess

from servelab.config import Settings
from servelab.fingerprint import usable_cores

log = logging.getLogger("servelab.service")


def per_worker(settings: Settings) -> Settings:
    """The settings each worker runs with: on a CPU, its share of the cores for its engine."""
    if settings.workers <= 1 or settings.threads:
        return settings
    return settings.with_(threads=max(1, usable_cores() // settings.workers), engine_instances=1)


class ServiceConfig(uvicorn.Config):
    """uvicorn's configuration of the service: its app made from `settings` (in each worker, for several), the
    request-head deadline, no access log."""

    def __init__(self, settings: Settings, **kwargs):
        from servelab.service.app import create_app
        from servelab.service.headers import HeaderDeadline

        self.settings = per_worker(settings)
        self.header_timeout_s = settings.header_timeout_s  # read by HeaderDeadline
        kwargs.setdefault("access_log", False)
        super().__init__(functools.partial(create_app, self.settings), factory=True, host=settings.host,
                         port=settings.port, workers=settings.workers, http=HeaderDeadline, **kwargs)


def serve(config: ServiceConfig) -> bool:
    """Serve until interrupted; False when the server did not start."""
    if config.workers > 1:
        log.info("%d worker processes on %s:%d, %s", config.workers, config.host, config.port,
                 f"{config.settings.threads} engine thread(s) each")
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return True
    server = uvicorn.Server(config)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    return server.started
