"""The review UI as a user meets it: a real uvicorn process, driven by a real headless Chromium.

Also the refusals: path traversal, ids of files outside the root (a tampered catalog, a symlink), forms
without the token — each must answer 4xx and leave every file where it was.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from servelab.dedup import Catalog, embed, scan
from servelab.dedup.catalog import default_catalog
from servelab.netutil import free_port, wait_http

from .conftest import PHASH_MAX, THRESHOLD, cli, make_known_set

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update"]


def _md5(p: Path) -> str:
    return hashlib.md5(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def review_server(tmp_path_factory, dedup_client):
    base = tmp_path_factory.mktemp("review")
    root = base / "photos"
    make_known_set(root)
    outside = base / "outside.jpg"  # a photo next to, not inside, the root
    shutil.copy(root / "single_0.jpg", outside)
    scan(root, default_catalog(root))
    with Catalog(default_catalog(root)) as cat:
        embed(cat, dedup_client, batch_size=8, progress=False)
    port = free_port()
    log = open(base / "review.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "servelab.cli", "dedup", "review", str(root), "--port", str(port),
                             "--threshold", str(THRESHOLD), "--phash-max", str(PHASH_MAX)],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_http(url + "/healthz", timeout=60, proc=proc):
            raise RuntimeError(f"review UI did not start: {(base / 'review.log').read_text()}")
        yield {"url": url, "root": root, "outside": outside, "base": base}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@pytest.mark.browser
def test_choose_keeper_delete_and_undo_in_chromium(review_server, tmp_path):
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing: run `make browser` (apt-get install chromium)")
    url, root = review_server["url"], review_server["root"]
    before = {p: _md5(root / p) for p in ("a.jpg", "copies/a_copy.jpg", "a_resized.png")}
    trash = root / ".servelab" / "trash"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url + "/")
        groups = page.locator("section.group")
        assert groups.count() == 4
        assert "3 near-duplicates" in groups.first.locator("h2").inner_text()  # largest group first
        # the rule that formed each group is on the page: in the header and on every group
        rule = f"cosine ≥ {THRESHOLD:g} and pHash distance ≤ {PHASH_MAX}"
        assert page.locator(".rule-text").inner_text() == rule
        assert "as given" in page.locator("p.rule").inner_text()
        by = [groups.nth(k).locator("h2 .rule").inner_text() for k in range(4)]
        assert sorted(by) == sorted([f"by {rule}; some members by identical bytes (MD5)",  # a.jpg, its copy, resized
                                     f"by {rule}", f"by {rule}", "by identical bytes (MD5)"])
        api = httpx.get(url + "/api/groups").json()
        assert api["rule"]["text"] == rule and sorted(g["rule"] for g in api["groups"]) == sorted(b[3:] for b in by)
        group = groups.filter(has=page.locator("dd.path", has_text="a_resized.png"))
        for name in before:
            card = group.locator("label.card", has=page.locator("dd.path", has_text=name))
            text = card.inner_text()
            assert name in text and "×" in text and ("KB" in text or " B" in text)
            assert card.locator("img").evaluate("img => img.complete && img.naturalWidth > 0")  # thumbnail served
        # a size-weighted default keeper is preselected; choose another one: the small PNG
        keeper = group.locator("label.card", has=page.locator("dd.path", has_text="a_resized.png"))
        keeper.click()
        assert keeper.locator("input[type=radio]").is_checked()
        page.screenshot(path=str(tmp_path / "review.png"), full_page=True)
        if os.environ.get("SERVELAB_SCREENSHOT_DIR"):
            shutil.copy(tmp_path / "review.png", Path(os.environ["SERVELAB_SCREENSHOT_DIR"]) / "review.png")
        group.locator("button.delete").click()
        page.wait_for_load_state()
        assert "Moved 2 file(s) to the trash" in page.locator(".flash").inner_text()
        assert page.locator("section.group").count() == 3  # the group is resolved

        assert (root / "a_resized.png").exists()
        for name in ("a.jpg", "copies/a_copy.jpg"):
            assert not (root / name).exists()
            in_trash = list(trash.glob(f"*/{name}"))
            assert len(in_trash) == 1 and _md5(in_trash[0]) == before[name]
        manifest = (trash / "manifest.jsonl").read_text().splitlines()
        ops = [json.loads(ln)["op"] for ln in manifest]
        assert ops == ["trash", "moved", "trash", "moved"]  # each move bracketed: intent, then done

        page.goto(url + "/trash")
        assert page.locator("section.batch li").count() == 2
        page.locator("button.undo").first.click()
        page.wait_for_load_state()
        assert "Restored 2 file(s)" in page.locator(".flash").inner_text()
        if os.environ.get("SERVELAB_SCREENSHOT_DIR"):
            page.screenshot(path=str(Path(os.environ["SERVELAB_SCREENSHOT_DIR"]) / "trash.png"), full_page=True)
        page.goto(url + "/")
        assert page.locator("section.group").count() == 4
        # "not duplicates" is remembered in the catalog and the group goes away
        page.locator("section.group", has=page.locator("dd.path", has_text="deep/x/c.webp")).locator("button.notdup").click()
        page.wait_for_load_state()
        assert "not duplicates" in page.locator(".flash").inner_text()
        assert page.locator("section.group").count() == 3
        # whatever a page shows is escaped by the templates: markup in a message stays text
        page.goto(url + "/?msg=" + quote('<b id="injected">bold</b>'))
        assert page.locator("#injected").count() == 0 and '<b id="injected">' in page.locator(".flash").inner_text()
        browser.close()
    with Catalog(default_catalog(root)) as cat:
        ids = {r["path"]: r["id"] for r in cat.files("ok")}
        assert tuple(sorted((ids["c.jpg"], ids["deep/x/c.webp"]))) in cat.not_duplicate_pairs()
    for name, digest in before.items():
        assert _md5(root / name) == digest  # back at the original path, byte-identical
    assert not any(p.is_file() for p in trash.rglob("*") if p.name != "manifest.jsonl")


def _raw_get(url: str, path: str) -> int:
    """GET with the path sent exactly as written (httpx would normalise the dots away)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", path)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp.status


def test_traversal_and_outside_root_requests_are_refused(review_server):
    url, root, outside = review_server["url"], review_server["root"], review_server["outside"]
    outside_md5 = _md5(outside)
    for path in ("/thumb/../../../etc/passwd", "/thumb/..%2F..%2Fetc%2Fpasswd", "/../../etc/passwd",
                 "/thumb/%2e%2e/%2e%2e/etc/hostname", "/thumb/-1", "/thumb/999999"):
        status = _raw_get(url, path)
        assert 400 <= status < 500, (path, status)
    r = httpx.get(url + "/thumb/not-a-number")
    assert r.status_code == 422 and "error" in r.json()

    # a tampered catalog that points outside the root, and a symlink inside the root that leads outside
    os.symlink(outside, root / "sneaky.jpg")
    with Catalog(default_catalog(root)) as cat:
        with cat.db:
            cur = cat.db.execute("INSERT INTO files(path, status, size, mtime_ns, md5) VALUES (?, 'ok', ?, ?, 'x')",
                                 ("../outside.jpg", outside.stat().st_size, outside.stat().st_mtime_ns))
            bad_id = cur.lastrowid
            link_id = cat.db.execute("INSERT INTO files(path, status, size, mtime_ns, md5) VALUES ('sneaky.jpg', 'ok', ?, ?, 'y')",
                                     (outside.stat().st_size, outside.stat().st_mtime_ns)).lastrowid
        keeper = cat.db.execute("SELECT id FROM files WHERE path='b.jpg'").fetchone()[0]
    try:
        for fid in (bad_id, link_id):
            r = httpx.get(f"{url}/thumb/{fid}")
            err = r.json()["error"]
            assert r.status_code == 403 and ("outside the scanned root" in err or "symbolic link" in err), err
        page = httpx.get(url + "/").text
        token = page.split('name="token" value="', 1)[1].split('"', 1)[0]
        r = httpx.post(url + "/resolve", data={"token": token, "keeper": keeper, "member": [keeper, bad_id]})
        assert r.status_code == 409  # not in the keeper's group: refused before any move
        r = httpx.post(url + "/resolve", data={"keeper": keeper, "member": [keeper]})
        assert r.status_code == 403 and "token" in r.json()["error"]
        r = httpx.post(url + "/undo", data={"token": token, "batch": "../../etc"})
        assert r.status_code == 409 and "no trash batch" in r.json()["error"]
        # the command line refuses the same ids, in one line, and moves nothing
        for fid in (bad_id, link_id):
            proc = cli("delete", fid, "--root", root, check=False)
            assert proc.returncode == 1 and proc.stderr.startswith("error: refused path")
        assert _md5(outside) == outside_md5 and outside.exists() and (root / "sneaky.jpg").is_symlink()
    finally:
        with Catalog(default_catalog(root)) as cat, cat.db:
            cat.db.execute("DELETE FROM files WHERE id IN (?, ?)", (bad_id, link_id))
        (root / "sneaky.jpg").unlink()


def test_cli_delete_and_undo_round_trip(review_server):
    root = review_server["root"]
    with Catalog(default_catalog(root)) as cat:
        rows = {r["path"]: r["id"] for r in cat.files("ok")}
    digest = _md5(root / "b_q40.jpg")
    proc = cli("delete", rows["b_q40.jpg"], "--root", root, "--keeper", rows["b.jpg"])
    assert "moved 1 file(s)" in proc.stdout and not (root / "b_q40.jpg").exists()
    proc = cli("delete", rows["b_q40.jpg"], "--root", root, check=False)  # already in the trash
    assert proc.returncode == 1 and "trashed" in proc.stderr
    proc = cli("delete", rows["b.jpg"], "--root", root, "--keeper", rows["b.jpg"], check=False)
    assert proc.returncode == 1 and "keeper" in proc.stderr and (root / "b.jpg").exists()
    cli("undo", "--root", root)
    assert _md5(root / "b_q40.jpg") == digest
    proc = cli("undo", "--root", root, check=False)
    assert proc.returncode == 1 and "nothing to undo" in proc.stderr
