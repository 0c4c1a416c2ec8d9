"""Review UI: FastAPI + server-rendered HTML (no JavaScript needed) over one catalog.

URLs carry catalog ids, never paths; every file is reached through `Catalog.safe_path`, which refuses
anything outside the scanned root. Deleting moves files to the trash (see trash.py) and the trash page undoes
it. POST forms carry a per-process token so another web page cannot drive the UI from the user's browser.
Bad requests get a 4xx JSON body naming the problem.
"""

from __future__ import annotations

import html
import io
import secrets
import threading
import time
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from PIL import Image

from servelab.dedup.catalog import Catalog, OutsideRoot
from servelab.dedup.group import group as find_groups
from servelab.dedup.trash import TrashError, batches, restore, trash_files
from servelab.model.preprocess import ImageDecodeError, decode_image

PAGE_SIZE = 40
THUMB = 360


def create_app(catalog: str | Path, threshold: float = 0.92, phash_max: int | None = None,
               method: str = "auto") -> FastAPI:
    cat = Catalog(catalog)
    app = FastAPI(title="servelab photo finder", docs_url=None, redoc_url=None, openapi_url=None)
    token = secrets.token_urlsafe(16)
    lock = threading.Lock()  # one catalog connection; keep writes and group recomputation serial
    cache: dict = {}
    app.state.catalog, app.state.token = cat, token

    def groups():
        with lock:
            return find_groups(cat, threshold=threshold, phash_max=phash_max, method=method, cache=cache)

    def check_token(value: str) -> None:
        if not secrets.compare_digest(value or "", token):
            raise HTTPException(403, "missing or wrong form token: reload the page and try again")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

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
        counts = cat.counts()
        pages = max(1, -(-len(gs) // PAGE_SIZE))
        page = min(max(page, 1), pages)
        body = [_header(cat, counts, len(gs), msg, err)]
        if not gs:
            body.append('<p class="empty">No duplicate groups left. 🎉</p>')
        for g in gs[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]:
            body.append(_group_html(g, token))
        if pages > 1:
            links = " ".join(f'<a href="/?page={p}"{" class=cur" if p == page else ""}>{p}</a>' for p in range(1, pages + 1))
            body.append(f'<nav class="pages">pages: {links}</nav>')
        return _page("Duplicates", "".join(body))

    @app.get("/api/groups")
    def api_groups():
        return {"root": str(cat.root), "threshold": threshold, "phash_max": phash_max,
                "weights": cat.get_meta("embed_weights"), "groups": [g.as_dict() for g in groups()]}

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
        current = {g.key: set(g.ids) for g in groups()}
        ids = set(member) | {keeper}
        home = [k for k, s in current.items() if keeper in s]
        if not home or not ids <= current[home[0]]:
            raise HTTPException(409, "these photos are no longer one duplicate group; reload the page")
        doomed = sorted(ids - {keeper})
        if not doomed:
            raise HTTPException(400, "nothing to delete: only the keeper was selected")
        with lock:
            try:
                res = trash_files(cat, doomed, keeper=keeper, note="review UI")
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
        bs = batches(cat)
        rows = []
        for b in bs:
            files = "".join(
                f'<li class="{"restored" if f["restored"] else ""}">{html.escape(f["original"])}'
                f'{" — restored" if f["restored"] else ""}</li>' for f in b["files"])
            undo = (f'<form method="post" action="/undo"><input type="hidden" name="token" value="{token}">'
                    f'<input type="hidden" name="batch" value="{html.escape(b["batch"])}">'
                    f'<button class="undo" data-batch="{html.escape(b["batch"])}">Undo: restore {b["in_trash"]} file(s)</button></form>'
                    if b["in_trash"] else "")
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(b["time"]))
            rows.append(f'<section class="batch"><h3>Batch {html.escape(b["batch"])} <small>{when}</small></h3>'
                        f"<ul>{files}</ul>{undo}</section>")
        body = (f'<header><h1>Trash</h1><a href="/">← duplicates</a></header>{_flash(msg, err)}'
                f'<p class="hint">Files in <code>{html.escape(str(cat.trash_dir))}</code>; '
                "nothing is ever hard-deleted. Undo moves a batch back to its original paths.</p>"
                + ("".join(rows) or '<p class="empty">The trash is empty.</p>'))
        return _page("Trash", body)

    @app.post("/undo")
    def undo(token_: str = Form("", alias="token"), batch: str = Form(...)):
        check_token(token_)
        with lock:
            try:
                res = restore(cat, batch)
            except (TrashError, OutsideRoot) as exc:
                raise HTTPException(409, str(exc)) from None
        msg = f"Restored {len(res['restored'])} file(s) to their original paths."
        return RedirectResponse(f"/trash?msg={quote(msg)}", status_code=303)

    return app


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


def _group_html(g, token: str) -> str:
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
    cards = []
    for m in g.members:
        date = m["taken"] or time.strftime("%Y-%m-%d %H:%M", time.localtime((m["mtime_ns"] or 0) / 1e9)) + " (file time)"
        badges = []
        if md5_count[m["md5"]] > 1:
            badges.append('<span class="badge exact">identical bytes</span>')
        if m["id"] in best:
            badges.append(f'<span class="badge">cos {best[m["id"]]:.3f}</span>')
        if m["id"] in phd:
            badges.append(f'<span class="badge">pHash Δ {phd[m["id"]]}</span>')
        checked = " checked" if m["id"] == keeper else ""
        cards.append(
            f'<label class="card" data-id="{m["id"]}">'
            f'<img src="/thumb/{m["id"]}" alt="{html.escape(m["path"])}" loading="lazy">'
            f'<span class="keep"><input type="radio" name="keeper" value="{m["id"]}"{checked}> keep this one</span>'
            f'<dl><dt>resolution</dt><dd>{m["width"]}×{m["height"]}</dd><dt>size</dt><dd>{_human(m["size"])}</dd>'
            f'<dt>date</dt><dd>{html.escape(str(date))}</dd><dt>path</dt><dd class="path">{html.escape(m["path"])}</dd></dl>'
            f'<div class="badges">{"".join(badges)}</div>'
            f'<input type="hidden" name="member" value="{m["id"]}"></label>')
    kind = "exact copies" if g.kind == "exact" else "near-duplicates"
    return (f'<section class="group" id="g{g.key}" data-group="{g.key}">'
            f'<h2>{len(g.ids)} {kind}</h2>'
            f'<form method="post" action="/resolve"><input type="hidden" name="token" value="{token}">'
            f'<div class="cards">{"".join(cards)}</div>'
            f'<div class="actions"><button class="delete" type="submit">Keep the selected photo, move the others to trash</button>'
            f'<button class="notdup" type="submit" formaction="/not-duplicate">Not duplicates</button></div>'
            f"</form></section>")


def _flash(msg: str, err: str) -> str:
    out = ""
    if msg:
        out += f'<p class="flash">{html.escape(msg)}</p>'
    if err:
        out += f'<p class="flash error">{html.escape(err)}</p>'
    return out


def _header(cat: Catalog, counts: dict, n_groups: int, msg: str, err: str) -> str:
    weights = cat.get_meta("embed_weights") or "none (exact copies only)"
    return (f'<header><h1>Photo finder</h1><a href="/trash">Trash →</a></header>'
            f'<p class="meta">root <code>{html.escape(str(cat.root))}</code> · {counts.get("ok", 0)} photos · '
            f'{counts.get("embedded", 0)} embedded · {n_groups} duplicate groups · embedding weights: '
            f"{html.escape(weights)}</p>{_flash(msg, err)}")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:1rem 1.5rem;
color:#1d2433;background:#f5f6f8}
header{display:flex;justify-content:space-between;align-items:baseline}
h1{margin:.2rem 0;font-size:1.6rem} a{color:#2456c7}
.meta,.hint{color:#5b6475;font-size:.9rem} code{background:#e8eaef;padding:0 .3em;border-radius:3px}
.flash{background:#e3f4e6;border:1px solid #9fd3a9;padding:.5rem .8rem;border-radius:6px}
.flash.error{background:#fde8e8;border-color:#f0a3a3}
.group{background:#fff;border-radius:10px;box-shadow:0 1px 3px rgba(0,0,0,.12);padding:.8rem 1rem;margin:1rem 0}
.group h2{font-size:1.05rem;margin:.2rem 0 .6rem}
.cards{display:flex;gap:.8rem;flex-wrap:wrap}
.card{flex:0 1 260px;border:2px solid #e1e4ea;border-radius:8px;padding:.5rem;cursor:pointer;background:#fafbfc}
.card:has(input[type=radio]:checked){border-color:#2e9e4f;background:#f1faf3}
.card img{width:100%;height:200px;object-fit:contain;background:#eceef2;border-radius:4px;display:block}
.keep{display:block;margin:.4rem 0;font-weight:600}
dl{display:grid;grid-template-columns:auto 1fr;gap:.1rem .6rem;margin:.2rem 0;font-size:.85rem}
dt{color:#5b6475} dd{margin:0} .path{word-break:break-all;font-family:ui-monospace,monospace;font-size:.8rem}
.badge{display:inline-block;background:#e8eefc;color:#2456c7;border-radius:10px;padding:0 .5em;margin:.2rem .2rem 0 0;font-size:.75rem}
.badge.exact{background:#fdf0d9;color:#8a5a00}
.actions{margin-top:.7rem;display:flex;gap:.6rem}
button{font-size:.9rem;padding:.45rem .9rem;border-radius:6px;border:1px solid #c5cad3;background:#fff;cursor:pointer}
button.delete{background:#c7352c;border-color:#a82b23;color:#fff} button.undo{background:#2456c7;color:#fff;border-color:#1d46a3}
.batch{background:#fff;border-radius:8px;padding:.5rem 1rem;margin:.8rem 0;box-shadow:0 1px 3px rgba(0,0,0,.1)}
.batch h3{font-size:.95rem;margin:.3rem 0} li.restored{color:#8a93a3}
.pages a{margin:0 .2rem} .pages a.cur{font-weight:700} .empty{color:#5b6475;font-size:1.1rem}
"""


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title} · servelab</title>'
                        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style>'
                        f"</head><body>{body}</body></html>")


def serve(catalog: str | Path, host: str = "127.0.0.1", port: int = 8000, **kwargs) -> None:
    import uvicorn

    uvicorn.run(create_app(catalog, **kwargs), host=host, port=port, log_level="warning")
