"""The FastAPI inference service (`servelab serve`, `python -m servelab.service`)."""

from servelab.service.app import create_app

__all__ = ["create_app", "run"]


def run(settings=None, log_level: str = "info") -> None:
    """Serve until interrupted; host, port, workers and everything else from settings (SERVELAB_* env)."""
    import sys

    from uvicorn.config import STARTUP_FAILURE

    from servelab.config import Settings
    from servelab.service.launch import ServiceConfig, serve

    config = ServiceConfig(settings or Settings.from_env(), log_level=log_level)
    if not serve(config):
        sys.exit(STARTUP_FAILURE)
