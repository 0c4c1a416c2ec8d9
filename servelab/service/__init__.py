"""The FastAPI inference service (`servelab serve`, `python -m servelab.service`)."""

from servelab.service.app import create_app

__all__ = ["create_app", "run"]


def run(settings=None, log_level: str = "info") -> None:
    """Serve until interrupted; host, port and everything else from settings (SERVELAB_* env)."""
    import uvicorn

    from servelab.config import Settings
    from servelab.service.headers import header_deadline

    settings = settings or Settings.from_env()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=log_level, access_log=False,
                http=header_deadline(settings.header_timeout_s))
