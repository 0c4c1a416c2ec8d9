"""Review UI: FastAPI + server-rendered HTML (no JavaScript needed) over one catalog.

Pages come from Jinja2 templates in `templates/` with auto-escaping on, so every path, message and id a
page shows is escaped by the template engine, not by hand. Each group names the rule that formed it.

URLs carry catalog ids, never paths; every file is reached through `Catalog.safe_path`, which refuses
anything outside the scanned root. Deleting moves files to the trash (see trash.py) and the trash page undoes
it. POST forms carry a per-process token so another web page cannot drive the UI from the user's browser,
and the UI answers only to its own host name and port and refuses to be framed (hostcheck.py), so another
site can neither read that token through DNS rebinding nor overlay the buttons.

Keep/delete re-checks the group and the keeper inside the lock that trashes, so two windows resolving one
group differently cannot both delete: the second gets 409 saying the group was already resolved.
Bad requests get a 4xx JSON body naming the problem.
"""

from __future__ import annotations

import io
import secrets
import sys
import threading
import time
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader
from PIL import Image
from starlette.exceptions import HTTPException as StarletteHTTPException

from servelab.config import REVIEW_PORT
from servelab.dedup.catalog import Catalog, OutsideRoot
from servelab.dedup.group import EXACT_RULE, rule_for
from servelab.dedup.group import group as find_groups
from servelab.dedup.hostcheck import HostCheck, allowed_names
from servelab.dedup.lock import FolderBusy, folder_lock
from servelab.dedup.trash import KeeperGone, TrashError, batches, manifest_problems, recover, restore, trash_files
from servelab.model.preprocess import ImageDecodeError, decode_image

PAGE_SIZE = 40
THUMB = 360
TEMPLATES = Environment(loader=PackageLoader("servelab.dedup", "templates"), autoescape=True)


def create_app(catalog: str | Path, threshold: float | None = None, phash_max: int | None = None,
               method: str = "auto", cosine_only: bool = False, host: str = "127.0.0.1", port: int = REVIEW_PORT,
               allowed_hosts: tuple[str, ...] = ()) -> FastAPI:
    """The review app; threshold / phash_max / cosine_only as for `group` (unset: the safe default). `host` and
    `port` are where it is served: requests naming any other host are refused (`allowed_hosts` adds names)."""
    cat = Catalog(catalog)
    fixed = recover(cat)  # close what a killed delete or undo left open before showing anything
    for problem in fixed["conflicts"] + fixed["bad_lines"]:
        print(f"warning: {problem}", file=sys.stderr)
    app = FastAPI(title="servelab photo finder", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(HostCheck, names=allowed_names(host, allowed_hosts), port=port)
    token = secrets.token_urlsafe(16)
    lock = threading.RLock()  # one catalog connection; keep writes and group recomputation serial
    cache: dict = {}
    app.state.catalog, app.state.token = cat, token

    def rule():
        return rule_for(cat, threshold, phash_max, cosine_only)  # follows the weights if the catalog is re-embedded

    rule()  # bad settings fail at start, not on the first page view

    def groups():
        with lock:
            return find_groups(cat, rule=rule(), method=method, cache=cache)

    def check_token(value: str) -> None:
        if not secrets.compare_digest(value or "", token):
            raise HTTPException(403, "missing or wrong form token: reload the page and try again")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    @app.exception_handler(FolderBusy)
    async def _busy(request: Request, exc: FolderBusy):
        return JSONResponse({"error": str(exc)}, status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        problems = "; ".join(f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors())
        return JSONResponse({"error": f"bad request: {problems}"}, status_code=422)

    @app.get("/healthz")
    def healthz():
        return {"ok": True, "root": str(cat.root)}

    @app.get("/", response_class=HTMLResponse)
    def index(page: int = 1, msg: str = "", err: str = ""):
        gs = groups()
        pages = max(1, -(-len(gs) // PAGE_SIZE))
        page = min(max(page, 1), pages)
        shown = gs[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
        return _render("index.html", title="Duplicates", root=str(cat.root), counts=cat.counts(), n_groups=len(gs),
                       weights=cat.get_meta("embed_weights"), rule=rule(), exact_rule=EXACT_RULE, msg=msg, err=err,
                       groups=shown, cards={g.key: _cards(g) for g in shown}, token=token, page=page, pages=pages)

    @app.get("/api/groups")
    def api_groups():
        return {"root": str(cat.root), "weights": cat.get_meta("embed_weights"), "rule": rule().as_dict(),
                "groups": [g.as_dict() for g in groups()]}

    @app.get("/thumb/{file_id}")
    def thumb(file_id: int):
        row = cat.file(file_id)
        if row is None or row["status"] != "ok":
            raise HTTPException(404, f"no catalogued photo with id {file_id}")
        try:
            path = cat.safe_path(row["path"])
        except OutsideRoot as exc:
            raise HTTPException(403, str(exc)) from None
        try:
            data = _thumbnail(str(path), row["size"], row["mtime_ns"])
        except (OSError, ImageDecodeError) as exc:
            raise HTTPException(404, f"cannot read photo {file_id}: {exc}") from None
        return Response(data, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=300"})

    @app.post("/resolve")
    def resolve(token_: str = Form("", alias="token"), keeper: int = Form(...), member: list[int] = Form(...)):
        check_token(token_)
        ids = set(member) | {keeper}
        doomed = sorted(ids - {keeper})
        if not doomed:
            raise HTTPException(400, "nothing to delete: only the keeper was selected")
        with lock, folder_lock(cat):  # the check and the move are one step: no other window or process between
            recover(cat)
            resolved = _already_resolved(cat, ids)
            if resolved:
                return JSONResponse({"error": f"this group was already resolved: {resolved}; nothing was moved. "
                                              "Reload the page", "resolved": True}, status_code=409)
            current = {g.key: set(g.ids) for g in groups()}
            home = [k for k, s in current.items() if keeper in s]
            if not home or not ids <= current[home[0]]:
                raise HTTPException(409, "these photos are no longer one duplicate group; reload the page")
            try:
                res = trash_files(cat, doomed, keeper=keeper, note="review UI")
            except KeeperGone as exc:
                return JSONResponse({"error": f"this group was already resolved: {exc}", "resolved": True},
                                    status_code=409)
            except (TrashError, OutsideRoot) as exc:
                raise HTTPException(409, str(exc)) from None
        msg = f"Moved {len(res['files'])} file(s) to the trash (batch {res['batch']}); undo on the Trash page."
        return RedirectResponse(f"/?msg={quote(msg)}", status_code=303)

    @app.post("/not-duplicate")
    def not_duplicate(token_: str = Form("", alias="token"), member: list[int] = Form(...)):
        check_token(token_)
        if len(set(member)) < 2:
            raise HTTPException(400, "need at least two photos to mark as not duplicates")
        for fid in member:
            if cat.file(fid) is None:
                raise HTTPException(404, f"no catalogued photo with id {fid}")
        with lock:
            n = cat.add_not_duplicate(member)
        return RedirectResponse(f"/?msg={quote(f'Noted: {len(set(member))} photos are not duplicates ({n} pairs).')}",
                                status_code=303)

    @app.get("/trash", response_class=HTMLResponse)
    def trash_page(msg: str = "", err: str = ""):
        shown = [{**b, "when": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(b["time"]))} for b in batches(cat)]
        return _render("trash.html", title="Trash", trash_dir=str(cat.trash_dir), batches=shown, token=token,
                       msg=msg, err=err, problems=manifest_problems(cat))

    @app.post("/undo")
    def undo(token_: str = Form("", alias="token"), batch: str = Form(...)):
        check_token(token_)
        with lock:
            try:
                res = restore(cat, batch)
            except (TrashError, OutsideRoot) as exc:
                raise HTTPException(409, str(exc)) from None
        msg = f"Restored {len(res['restored'])} file(s) to their original paths."
        err = "; ".join(f"{f['original']} could not be restored: {f['reason']}" for f in res["failed"])
        return RedirectResponse(f"/trash?msg={quote(msg)}&err={quote(err)}", status_code=303)

    return app


def _already_resolved(cat: Catalog, ids) -> str | None:
    """Which of these photos another window (or process) has already moved to the trash, in words; or None."""
    gone = [row for row in (cat.file(i) for i in sorted(ids)) if row is not None and row["status"] == "trashed"]
    return "; ".join(f"{row['path']} is already in the trash ({row['reason']})" for row in gone) or None


@lru_cache(maxsize=512)
def _thumbnail(path: str, size: int, mtime_ns: int) -> bytes:
    img = decode_image(Path(path).read_bytes(), max_bytes=256 * 1024 * 1024, max_pixels=120_000_000)
    img.thumbnail((THUMB, THUMB), Image.BICUBIC)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=85)
    return buf.getvalue()


def _human(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def default_keeper(members: list[dict]) -> int:
    """Most pixels, then largest file, then oldest, then shortest path."""
    best = sorted(members, key=lambda m: (-(m["width"] or 0) * (m["height"] or 0), -(m["size"] or 0),
                                          m["taken"] or "9999", m["mtime_ns"] or 0, len(m["path"]), m["path"]))
    return best[0]["id"]


def _cards(g) -> dict[int, dict]:
    """What each member's card shows besides its row: keeper preselection, size, date and edge badges."""
    keeper = default_keeper(g.members)
    best: dict[int, float] = {}
    phd: dict[int, int] = {}
    for e in g.edges:
        for x in (e["a"], e["b"]):
            if e["cosine"] is not None:
                best[x] = max(best.get(x, -1.0), e["cosine"])
            if e.get("phash_distance") is not None:
                phd[x] = min(phd.get(x, 99), e["phash_distance"])
    md5_count: dict[str, int] = {}
    for m in g.members:
        md5_count[m["md5"]] = md5_count.get(m["md5"], 0) + 1
    return {m["id"]: {
        "keeper": m["id"] == keeper, "size": _human(m["size"]), "identical": md5_count[m["md5"]] > 1,
        "cosine": best.get(m["id"]), "phash": phd.get(m["id"]),
        "date": m["taken"] or time.strftime("%Y-%m-%d %H:%M", time.localtime((m["mtime_ns"] or 0) / 1e9)) + " (file time)",
    } for m in g.members}


def _render(template: str, **context) -> HTMLResponse:
    return HTMLResponse(TEMPLATES.get_template(template).render(**context))


def serve(catalog: str | Path, host: str = "127.0.0.1", port: int = REVIEW_PORT, **kwargs) -> None:
    import uvicorn

    uvicorn.run(create_app(catalog, host=host, port=port, **kwargs), host=host, port=port, log_level="warning")
