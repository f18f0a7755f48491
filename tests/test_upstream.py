"""The upstream lock and its fetcher, against a real HTTP server on loopback serving a folder laid
out <owner>/<repo>/<commit>/<path> as raw.githubusercontent.com does; and the rule that every
upstream file a test reads comes through the lock."""

from __future__ import annotations

import functools
import hashlib
import re
import socket
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from components import upstream, versions

COMMIT = "8eab68778fc1b52affe165fdf5af29d1e9b4f3cb"
FILES = {
    # local path -> (path in the repository, content)
    "kueue/v0.19.2/values.yaml": ("charts/kueue/values.yaml", b"enableCertManager: false\n"),
    "kueue/v0.19.2/crds/kueue.x-k8s.io_workloads.yaml": (
        "config/components/crd/bases/kueue.x-k8s.io_workloads.yaml",
        b"kind: CustomResourceDefinition\nspec:\n  group: kueue.x-k8s.io\n",
    ),
}


def sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def entry(local: str, repo_path: str, body: bytes) -> upstream.LockEntry:
    return upstream.LockEntry(component="kueue", version="v0.19.2", repo="kubernetes-sigs/kueue", commit=COMMIT,
                              path=repo_path, local_path=local, bytes=len(body), sha256=sha(body))


ENTRIES = [entry(local, path, body) for local, (path, body) in FILES.items()]


class Mirror:
    """A folder served over HTTP on loopback; `requests` lists the paths asked for."""

    def __init__(self, root: Path):
        self.root = root
        self.requests: list[str] = []
        mirror = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(root), **kwargs)

            def do_GET(self):
                mirror.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args):  # keep pytest's output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def put(self, entry: upstream.LockEntry, body: bytes) -> None:
        file = self.root / entry.repo / entry.commit / entry.path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(body)

    def __enter__(self) -> Mirror:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def mirror(tmp_path):
    with Mirror(tmp_path / "mirror") as m:
        for e in ENTRIES:
            m.put(e, FILES[e.local_path][1])
        yield m


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_fetch_fills_the_cache_laid_out_by_component_and_version(mirror, tmp_path):
    cache, lines = tmp_path / "cache", []
    assert upstream.fetch(ENTRIES, cache, mirror.url, lines.append) == (2, sum(e.bytes for e in ENTRIES))
    for local, (path, body) in FILES.items():
        assert (cache / local).read_bytes() == body
    assert sorted(mirror.requests) == sorted(f"/kubernetes-sigs/kueue/{COMMIT}/{p}" for p, _ in FILES.values())
    assert lines[0] == f"upstream: fetching 2 file(s), 0.0 MB, from {mirror.url} into {cache}"
    assert lines[-1] == "upstream: [2/2] kueue/v0.19.2/crds/kueue.x-k8s.io_workloads.yaml (0.0 MB)"
    assert not list(cache.rglob("*.part"))


def test_a_cache_hit_is_not_fetched_again_and_a_damaged_copy_is(mirror, tmp_path):
    cache = tmp_path / "cache"
    upstream.fetch(ENTRIES, cache, mirror.url, lambda _: None)
    mirror.requests.clear()
    assert upstream.fetch(ENTRIES, cache, mirror.url, lambda _: None) == (0, 0)
    assert mirror.requests == []
    (cache / "kueue/v0.19.2/values.yaml").write_text("edited by hand\n")
    lines = []
    assert upstream.fetch(ENTRIES, cache, mirror.url, lines.append)[0] == 1
    assert lines[0] == "upstream: kueue/v0.19.2/values.yaml in the cache does not match the lock: fetching it again"
    assert (cache / "kueue/v0.19.2/values.yaml").read_bytes() == FILES["kueue/v0.19.2/values.yaml"][1]


def test_a_checksum_mismatch_deletes_the_download_and_names_both_checksums(mirror, tmp_path):
    bad = b"enableCertManager: true\n"
    mirror.put(ENTRIES[0], bad)
    cache = tmp_path / "cache"
    with pytest.raises(upstream.UpstreamError) as error:
        upstream.fetch(ENTRIES, cache, mirror.url, lambda _: None)
    assert one_line(error) == (
        f"kueue/v0.19.2/values.yaml from {mirror.url}/kubernetes-sigs/kueue/{COMMIT}/charts/kueue/values.yaml: "
        f"sha256 {sha(bad)}, the lock says {ENTRIES[0].sha256}; the download was deleted"
    )
    assert not (cache / "kueue/v0.19.2/values.yaml").exists()
    assert not list(cache.rglob("*.part"))


def test_a_missing_file_names_the_url_the_status_and_the_ways_out(mirror, tmp_path):
    (mirror.root / "kubernetes-sigs/kueue" / COMMIT / "charts/kueue/values.yaml").unlink()
    with pytest.raises(upstream.UpstreamError) as error:
        upstream.fetch(ENTRIES, tmp_path / "cache", mirror.url, lambda _: None)
    message = one_line(error)
    assert message.startswith(
        f"cannot fetch kueue/v0.19.2/values.yaml: {mirror.url}/kubernetes-sigs/kueue/{COMMIT}/charts/kueue/values.yaml "
        "answered HTTP 404; offline? "
    )
    assert "UPSTREAM_BASE_URL" in message and "UPSTREAM_DIR" in message


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: nothing listens there


def test_no_server_names_what_could_not_be_fetched_and_the_ways_out(tmp_path):
    base = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(upstream.UpstreamError) as error:
        upstream.fetch(ENTRIES, tmp_path / "cache", base, lambda _: None)
    message = one_line(error)
    assert re.fullmatch(
        rf"cannot fetch kueue/v0\.19\.2/values\.yaml from {re.escape(base)}/kubernetes-sigs/kueue/{COMMIT}/"
        r"charts/kueue/values\.yaml \(.*[Cc]onnection refused.*\); offline\? set UPSTREAM_BASE_URL to a mirror laid "
        r"out <owner>/<repo>/<commit>/<path>, or UPSTREAM_DIR to a folder holding the files as <component>/<version>/\.\.\.",
        message,
    ), message


def _lock_file(tmp_path: Path) -> Path:
    rows = ["\t".join(upstream.COLUMNS)] + [
        "\t".join(str(getattr(e, c)) for c in upstream.COLUMNS) for e in ENTRIES
    ]
    lock = tmp_path / "upstream.lock.tsv"
    lock.write_text("\n".join(rows) + "\n")
    return lock


def test_the_command_fetches_then_reports_all_cached(mirror, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("UPSTREAM_DIR", raising=False)
    monkeypatch.setenv("UPSTREAM_BASE_URL", mirror.url)
    lock, cache = _lock_file(tmp_path), tmp_path / "cache"
    assert upstream.main(["fetch"], lock=lock, cache=cache) == 0
    assert capsys.readouterr().out.endswith(f"upstream: 2 files (0.0 MB) verified in {cache} (2 fetched)\n")
    assert upstream.main(["fetch"], lock=lock, cache=cache) == 0
    assert capsys.readouterr().out == f"upstream: 2 files (0.0 MB) verified in {cache} (all cached)\n"
    monkeypatch.setenv("UPSTREAM_BASE_URL", f"http://127.0.0.1:{_closed_port()}")
    (cache / "kueue/v0.19.2/values.yaml").unlink()
    assert upstream.main(["fetch"], lock=lock, cache=cache) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot fetch kueue/v0.19.2/values.yaml from ") and err.count("\n") == 1


def test_upstream_dir_is_verified_not_fetched_nor_deleted(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "offline"
    for local, (_, body) in FILES.items():
        (folder / local).parent.mkdir(parents=True, exist_ok=True)
        (folder / local).write_bytes(body)
    monkeypatch.setenv("UPSTREAM_DIR", str(folder))
    monkeypatch.setenv("UPSTREAM_BASE_URL", f"http://127.0.0.1:{_closed_port()}")  # would fail if asked
    lock = _lock_file(tmp_path)
    assert upstream.main(["fetch"], lock=lock, cache=tmp_path / "cache") == 0
    assert capsys.readouterr().out == f"upstream: 2 files (0.0 MB) verified in UPSTREAM_DIR={folder}\n"
    (folder / "kueue/v0.19.2/values.yaml").write_text("changed\n")
    assert upstream.main(["fetch"], lock=lock, cache=tmp_path / "cache") == 1
    assert capsys.readouterr().err == (
        f"error: {folder}/kueue/v0.19.2/values.yaml: sha256 {sha(b'changed' + bytes([10]))}, "
        f"the lock says {ENTRIES[0].sha256}\n"
    )
    assert (folder / "kueue/v0.19.2/values.yaml").exists(), "a folder the user owns is never cleaned"
    monkeypatch.setenv("UPSTREAM_DIR", str(tmp_path / "nowhere"))
    assert upstream.main(["fetch"], lock=lock) == 1
    assert "UPSTREAM_DIR=" in capsys.readouterr().err


def test_a_malformed_lock_row_names_its_line(tmp_path):
    lock = _lock_file(tmp_path)
    lock.write_text(lock.read_text().replace(ENTRIES[1].sha256, "not-a-checksum"))
    with pytest.raises(upstream.UpstreamError, match=r"^upstream\.lock\.tsv:3: String should match pattern"):
        upstream.read_lock(lock)


# --- the project's own lock, and the rule that tests reach upstream files only through it ---------


def test_a_file_outside_the_lock_is_refused():
    with pytest.raises(upstream.UpstreamError, match=r"^kueue/v0\.19\.2/crds/kueue\.x-k8s\.io_cohorts\.yaml is not in "
                                                     r"tests/upstream\.lock\.tsv: add its row"):
        upstream.path("kueue/v0.19.2/crds/kueue.x-k8s.io_cohorts.yaml")


TESTS = Path(__file__).resolve().parent


@functools.cache
def _sources() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(TESTS.glob("*.py")) if p.name not in {"upstream.py", Path(__file__).name}}


@pytest.mark.parametrize(
    "pattern, why",
    [
        (r"\.cache/upstream|UPSTREAM_DIR|UPSTREAM_BASE_URL", "only components/upstream.py knows where the files lie"),
        (r"schemas\.UPSTREAM|\bUPSTREAM\s*/", "paths are built by upstream.path, which checks the lock"),
    ],
)
def test_every_upstream_file_a_test_reads_goes_through_the_lock(pattern, why):
    offenders = [name for name, text in _sources().items() if re.search(pattern, text)]
    assert offenders == [], f"{', '.join(offenders)} reach upstream files around components/upstream.py ({why})"


REPO = TESTS.parent
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".ini", ".txt", ".sh", ".tsv", ".json", ".cfg"}
NOT_OURS = {".git", ".venv", ".cache", "results", "plan-out", "__pycache__", ".pytest_cache", ".pulumi-state"}


def _offline_folder() -> str:
    """The folder beside the clone that .ci/run gives CI as UPSTREAM_DIR: the one file that may name it."""
    m = re.search(r'UPSTREAM_DIR:-\$PWD/(\.\./[^/"}]+)', (REPO / ".ci" / "run").read_text())
    assert m, ".ci/run no longer points UPSTREAM_DIR at a folder beside the clone"
    return m.group(1)


def test_no_file_but_the_ci_script_names_the_folder_beside_the_clone():
    """A user's clone has nothing beside it: no code, test, comment or doc may point there."""
    folder = _offline_folder()
    pattern = re.compile(f"{re.escape(folder)}|{re.escape(folder.removeprefix('../'))}/upstream")
    offenders = [
        str(path.relative_to(REPO))
        for path in sorted(REPO.rglob("*"))
        if path.is_file()
        and not NOT_OURS & set(path.relative_to(REPO).parts)
        and (path.suffix in TEXT_SUFFIXES or path.name == "Makefile")
        and pattern.search(path.read_text(errors="replace"))
    ]
    assert offenders == [], f"{', '.join(offenders)} name {folder}, which only .ci/run may (as UPSTREAM_DIR)"


def test_every_locked_file_is_one_a_test_reads():
    """The lock holds only what the tests use: CRDs (the schema index reads each one), the defaults
    of a chart the versions module pins (values.yaml, Chart.yaml, values.schema.json, a subchart's
    values), and files a test names itself."""
    text = "\n".join(_sources().values())
    chart_dirs = {c.upstream for c in vars(versions).values() if isinstance(c, versions.Chart) and c.upstream}
    unused = []
    for local in upstream.locked_paths():
        folder, _, name = local.rpartition("/")
        chart = folder in chart_dirs or folder.rsplit("/charts/", 1)[0] in chart_dirs
        if "/crds/" in local or (name in ("values.yaml", "Chart.yaml", "values.schema.json") and chart):
            continue
        if name in text and folder in text:
            continue
        unused.append(local)
    assert unused == []


def test_the_readme_says_what_the_first_run_downloads():
    readme = (upstream.REPO / "README.md").read_text()
    entries = upstream.read_lock().values()
    said = re.search(r"(\d+) files, ([\d.]+) MB,\s+from\s+raw\.githubusercontent\.com", readme)
    assert said, "README.md no longer says how much the first make test downloads"
    assert (int(said[1]), float(said[2])) == (len(entries), round(sum(e.bytes for e in entries) / 1e6, 1))
