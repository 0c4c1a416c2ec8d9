"""The review UI against a real uvicorn process: two windows resolving one pair differently, requests that name
another host, framing, a remote bind, and a manifest with a malformed line.

The photos are byte-identical pairs (MD5 groups), so no embedding model is needed to form the groups.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from servelab.data import encode, synthetic_photo
from servelab.dedup import Catalog, scan
from servelab.dedup.catalog import default_catalog
from servelab.dedup.trash import manifest_path
from servelab.netutil import free_port, wait_http

from .conftest import cli

PAIRS = 6


def _md5(p: Path) -> str:
    return hashlib.md5(p.read_bytes()).hexdigest()


def _pairs(root: Path) -> list[tuple[int, int]]:
    """PAIRS pairs of identical photos under `root`, scanned; returns their (id, id) catalog pairs."""
    root.mkdir(parents=True)
    for k in range(PAIRS):
        data = encode(synthetic_photo(600 + k, (80, 60)))
        (root / f"p{k}_a.jpg").write_bytes(data)
        (root / f"p{k}_b.jpg").write_bytes(data)
    scan(root, default_catalog(root))
    with Catalog(default_catalog(root)) as cat:
        ids = {r["path"]: r["id"] for r in cat.files("ok")}
    return [(ids[f"p{k}_a.jpg"], ids[f"p{k}_b.jpg"]) for k in range(PAIRS)]


@contextlib.contextmanager
def _review(root: Path, log: Path, *args: str):
    """`servelab dedup review ROOT` on a free loopback port; yields (url, port)."""
    port = free_port()
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "servelab.cli", "dedup", "review", str(root), "--port",
                                 str(port), "--threshold", "0.9", "--phash-max", "10", *args],
                                stdout=fh, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            if not wait_http(url + "/healthz", timeout=60, proc=proc):
                raise RuntimeError(f"review UI did not start: {log.read_text()}")
            yield url, port
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def _token(url: str) -> str:
    page = httpx.get(url + "/").text
    return page.split('name="token" value="', 1)[1].split('"', 1)[0]


def test_two_windows_keeping_different_photos_of_a_pair_trash_exactly_one(tmp_path):
    root = tmp_path / "photos"
    pairs = _pairs(root)
    digests = {p.name: _md5(p) for p in root.glob("*.jpg")}
    with _review(root, tmp_path / "review.log") as (url, _):
        token = _token(url)
        # both windows loaded the page while each pair was unresolved; each keeps a different photo of it
        forms = [{"token": token, "keeper": keep, "member": [a, b]} for a, b in pairs for keep in (a, b)]
        answers: list = [None] * len(forms)
        start = threading.Barrier(len(forms))

        def post(i: int) -> None:
            with httpx.Client(timeout=60) as client:
                start.wait()
                answers[i] = client.post(url + "/resolve", data=forms[i])

        threads = [threading.Thread(target=post, args=(i,)) for i in range(len(forms))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    kept = {k: [n for n in (f"p{k}_a.jpg", f"p{k}_b.jpg") if (root / n).is_file()] for k in range(PAIRS)}
    assert all(len(names) == 1 for names in kept.values()), kept  # one photo of each pair kept, one trashed
    for k in range(PAIRS):
        assert _md5(root / kept[k][0]) == digests[kept[k][0]]
        first, second = answers[2 * k], answers[2 * k + 1]
        assert sorted([first.status_code, second.status_code]) == [303, 409], (k, first.text, second.text)
        body = (first if first.status_code == 409 else second).json()
        assert body["resolved"] is True and body["error"].startswith("this group was already resolved: "), body
    with Catalog(default_catalog(root)) as cat:
        records = [json.loads(line) for line in manifest_path(cat).read_text().splitlines()]
        assert sum(r["op"] == "moved" for r in records) == PAIRS  # one move per pair, and nothing half-done
        assert sum(r["status"] == "trashed" for r in cat.files(None)) == PAIRS


def test_requests_naming_another_host_are_refused_and_framing_is_forbidden(tmp_path):
    root = tmp_path / "photos"
    (a, b), *_ = _pairs(root)
    with _review(root, tmp_path / "review.log") as (url, port):
        token = _token(url)
        for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
            r = httpx.get(url + "/", headers={"Host": host})
            assert r.status_code == 200, host
            assert r.headers["content-security-policy"] == "frame-ancestors 'none'"
            assert r.headers["x-frame-options"] == "DENY"
        # a rebinding page: its own domain resolving to 127.0.0.1, or the right name on another port
        for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1:{port + 1}"):
            r = httpx.get(url + "/", headers={"Host": host})
            assert r.status_code == 421 and "does not answer to host" in r.json()["error"], host
            assert f"open http://127.0.0.1:{port}/" in r.json()["error"]
            assert 'name="token"' not in r.text
        r = httpx.post(url + "/resolve", headers={"Host": f"attacker.example:{port}"},
                       data={"token": token, "keeper": a, "member": [a, b]})
        assert r.status_code == 421
    assert len(list(root.glob("*.jpg"))) == 2 * PAIRS  # nothing moved


def test_a_remote_bind_needs_an_explicit_opt_in_and_warns(tmp_path):
    root = tmp_path / "photos"
    _pairs(root)
    proc = cli("review", root, "--host", "0.0.0.0", "--port", free_port(), check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "anyone who can reach this machine" in lines[0] and "--allow-remote" in lines[0]
    log = tmp_path / "review.log"
    with _review(root, log, "--host", "0.0.0.0", "--allow-remote") as (url, _):
        assert httpx.get(url + "/healthz").status_code == 200
    warning = [ln for ln in log.read_text().splitlines() if ln.startswith("warning: ")]
    assert len(warning) == 1 and "anyone who can reach this machine" in warning[0]


def test_the_ui_starts_with_a_malformed_manifest_line_and_shows_it(tmp_path):
    root = tmp_path / "photos"
    (a, b), *_ = _pairs(root)
    cli("delete", b, "--root", root, "--keeper", a)
    with Catalog(default_catalog(root)) as cat:
        path = manifest_path(cat)
    path.write_text(path.read_text() + json.dumps({"op": "trash", "batch": 7}) + "\nnot json at all\n")
    log = tmp_path / "review.log"
    with _review(root, log) as (url, _):
        page = httpx.get(url + "/trash").text
        assert page.count('class="flash error problem"') == 2 and "line 3 skipped" in page
        assert "Undo: restore 1 file(s)" in page  # the well-formed records still make the batch
    assert sum(ln.startswith(f"warning: {path} line ") for ln in log.read_text().splitlines()) == 2

