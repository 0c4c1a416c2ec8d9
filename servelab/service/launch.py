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
of the model on the device; one device owner fed by several frontends is another design (Triton's). A scrape of
/metrics reaches one worker and covers all of them: the run gets a private folder of its own (`metrics_folder`,
emptied when it starts, removed when it ends) where prometheus-client's multiprocess mode keeps every worker's
metrics (servelab.service.metrics says what a counter and a gauge then mean). /info says the answering worker's
own state, and the gate's limits hold per worker.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from pathlib import Path

import uvicorn
from uvicorn.supervisors import Multiprocess

from servelab.config import Settings
from servelab.fingerprint import usable_cores
from servelab.private_files import private_folder

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client's multiprocess mode: where its files are

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

    def load(self) -> None:
        """In each worker, before its app is built: a worker of several writes its metrics into the run's folder."""
        if self.settings.metrics_run_dir is not None:
            shared_metrics(self.settings.metrics_run_dir)
        super().load()

    def use_settings(self, settings: Settings) -> None:
        """Build the app (in each worker) from `settings` instead."""
        from servelab.service.app import create_app

        self.settings = settings
        self.app = functools.partial(create_app, settings)


def shared_metrics(folder: Path) -> None:
    """Switch this process's prometheus-client to its multiprocess mode, its metrics' values in files under
    `folder`: only PROMETHEUS_MULTIPROC_DIR switches it on (read by the library as each value's file is made), and
    the value class it chose on import is chosen again, which holds for the metrics made from here on. For a worker
    process of the service only: the switch is for the whole process."""
    from prometheus_client import values

    os.environ[MULTIPROC_ENV] = str(folder)
    values.ValueClass = values.get_value_class()


def metrics_folder(settings: Settings) -> Path:
    """This run's folder for its workers' metrics, under settings.metrics_dir: private to this user, named after
    this (the supervisor's) process, and emptied, so no earlier run's counts are added to this one's."""
    fix = "remove it, or set SERVELAB_METRICS_DIR to a folder only you can write"
    folder = private_folder(private_folder(settings.metrics_dir, fix) / f"run-{os.getpid()}", fix)
    for old in folder.iterdir():
        if old.is_file() and not old.is_symlink():
            old.unlink()
    return folder


def serve(config: ServiceConfig) -> bool:
    """Serve until interrupted; False when the server did not start."""
    if config.workers > 1:
        folder = metrics_folder(config.settings)
        config.use_settings(config.settings.with_(metrics_run_dir=folder))  # each worker switches it on (`load`)
        log.info("%d worker processes on %s:%d, %s; their metrics in %s", config.workers, config.host, config.port,
                 f"{config.settings.threads} engine thread(s) each", folder)
        try:
            Multiprocess(config, sockets=[config.bind_socket()]).run()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return True
    server = uvicorn.Server(config)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    return server.started
