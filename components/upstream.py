"""The upstream files of the pinned versions (CRDs, chart defaults, exporter counter lists): where each
comes from (tests/upstream.lock.tsv), a fetcher that fills a local cache from that lock, and `path`,
the one way to reach such a file. The tests validate against them, and the program's offline chart
stand-in (`cluster.charts: upstream-crds`, components.upstream_crds) applies the locked CRDs.

    python -m tests.upstream fetch      # make test runs it before pytest

Environment:
  UPSTREAM_BASE_URL  where to fetch from, laid out <owner>/<repo>/<commit>/<path in repo>
                     (default https://raw.githubusercontent.com; a mirror works the same)
  UPSTREAM_DIR       an existing folder laid out like the cache (<component>/<version>/...), used
                     instead of the cache: nothing is fetched, every checksum is still verified

Every file is checked against its sha256 in the lock, fetched or not: a file that changed upstream
or on disk fails the run rather than silently changing what the tests validate against.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "tests" / "upstream.lock.tsv"
CACHE = REPO / ".cache" / "upstream"
DEFAULT_BASE_URL = "https://raw.githubusercontent.com"
COLUMNS = ("component", "version", "repo", "commit", "path", "local_path", "bytes", "sha256")
TIMEOUT_S = 30.0
OFFLINE_HINT = (
    "offline? set UPSTREAM_BASE_URL to a mirror laid out <owner>/<repo>/<commit>/<path>, "
    "or UPSTREAM_DIR to a folder holding the files as <component>/<version>/..."
)


class UpstreamError(Exception):
    """A locked file could not be had or does not match the lock; the message is one line."""


class LockEntry(BaseModel):
    """One row of the lock: a file of one pinned upstream version."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    component: str = Field(pattern=r"^[a-z0-9-]+$")
    version: str = Field(min_length=1)
    repo: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", description="owner/name on GitHub")
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    path: str = Field(min_length=1, description="path in the repository at that commit")
    local_path: str = Field(description="<component>/<version>/... in the cache or UPSTREAM_DIR")
    bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    def url(self, base_url: str) -> str:
        return f"{base_url.rstrip('/')}/{self.repo}/{self.commit}/{self.path}"


@functools.cache
def read_lock(lock: Path = LOCK) -> dict[str, LockEntry]:
    """local_path -> entry; a malformed row fails naming its line."""
    with lock.open(newline="") as stream:
        rows = list(csv.reader(stream, delimiter="\t"))
    if not rows or tuple(rows[0]) != COLUMNS:
        raise UpstreamError(f"{lock.name}: the header must be {' '.join(COLUMNS)} (tab-separated)")
    entries: dict[str, LockEntry] = {}
    for line, row in enumerate(rows[1:], start=2):
        try:
            entry = LockEntry(**dict(zip(COLUMNS, row, strict=True)))
        except (ValueError, ValidationError) as e:
            reason = e.errors()[0]["msg"] if isinstance(e, ValidationError) else f"{len(row)} columns, not {len(COLUMNS)}"
            raise UpstreamError(f"{lock.name}:{line}: {reason}") from None
        if not entry.local_path.startswith(f"{entry.component}/{entry.version}/") or ".." in entry.local_path.split("/"):
            raise UpstreamError(f"{lock.name}:{line}: local_path must lie under {entry.component}/{entry.version}/")
        if entry.local_path in entries:
            raise UpstreamError(f"{lock.name}:{line}: {entry.local_path} is listed twice")
        entries[entry.local_path] = entry
    return entries


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


# ---------------------------------------------------------------------------------------------
# Where the files are, and the resolver every test goes through


def source_dir() -> Path:
    """UPSTREAM_DIR when set (it must exist), else the cache."""
    given = os.environ.get("UPSTREAM_DIR")
    if not given:
        return CACHE
    folder = Path(given)
    if not folder.is_dir():
        raise UpstreamError(f"UPSTREAM_DIR={given} is not a folder; unset it to use the cache ({CACHE.relative_to(REPO)})")
    return folder


def locked_paths() -> list[str]:
    """Every local path in the lock, sorted: what a test may read."""
    return sorted(read_lock())


def path(local_path: str) -> Path:
    """The verified file for `local_path` (<component>/<version>/...), which must be in the lock."""
    if local_path not in read_lock():
        raise UpstreamError(
            f"{local_path} is not in {LOCK.relative_to(REPO)}: add its row (component, version, repo, commit, "
            "path in the repo, local path, bytes, sha256) so every machine validates against the same file"
        )
    return _verified(source_dir(), local_path)


@functools.cache
def _verified(folder: Path, local_path: str) -> Path:
    """Checked once per process: the suite reads some files many times."""
    entry = read_lock()[local_path]
    file = folder / local_path
    if not file.is_file():
        if folder != CACHE:
            raise UpstreamError(f"UPSTREAM_DIR={folder} lacks {local_path}")
        raise UpstreamError(f"{local_path} is not in {folder}: run `python -m tests.upstream fetch` (make test does) first")
    actual = sha256_of(file)
    if actual != entry.sha256:
        raise UpstreamError(f"{file}: sha256 {actual}, the lock says {entry.sha256}")
    return file


# ---------------------------------------------------------------------------------------------
# Filling the cache


def fetch(
    entries: Iterable[LockEntry], cache: Path, base_url: str, log: Callable[[str], None] = print
) -> tuple[int, int]:
    """Download every entry not yet in `cache` with the right checksum; (files fetched, bytes fetched).

    A download whose checksum differs is deleted and fails the fetch; so does a cached copy that no
    longer matches (it is fetched again first).
    """
    todo = []
    for entry in entries:
        file = cache / entry.local_path
        if file.is_file() and sha256_of(file) == entry.sha256:
            continue
        if file.exists():
            log(f"upstream: {entry.local_path} in the cache does not match the lock: fetching it again")
            file.unlink()
        todo.append(entry)
    if not todo:
        return 0, 0
    total = sum(e.bytes for e in todo)
    log(f"upstream: fetching {len(todo)} file(s), {_mb(total)}, from {base_url} into {cache}")
    for i, entry in enumerate(todo, start=1):
        _fetch_one(entry, cache, base_url)
        log(f"upstream: [{i}/{len(todo)}] {entry.local_path} ({_mb(entry.bytes)})")
    return len(todo), total


def _fetch_one(entry: LockEntry, cache: Path, base_url: str) -> None:
    url = entry.url(base_url)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            body = response.read()
    except urllib.error.HTTPError as e:
        raise UpstreamError(f"cannot fetch {entry.local_path}: {url} answered HTTP {e.code}; {OFFLINE_HINT}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise UpstreamError(f"cannot fetch {entry.local_path} from {url} ({reason}); {OFFLINE_HINT}") from None
    file = cache / entry.local_path
    file.parent.mkdir(parents=True, exist_ok=True)
    partial = file.with_name(file.name + ".part")
    partial.write_bytes(body)
    actual = sha256_of(partial)
    if actual != entry.sha256:
        partial.unlink()
        raise UpstreamError(
            f"{entry.local_path} from {url}: sha256 {actual}, the lock says {entry.sha256}; the download was deleted"
        )
    partial.replace(file)


def verify_folder(entries: Iterable[LockEntry], folder: Path) -> int:
    """Check every entry in an UPSTREAM_DIR (nothing is fetched or deleted there); the file count."""
    count = 0
    for entry in entries:
        file = folder / entry.local_path
        if not file.is_file():
            raise UpstreamError(f"UPSTREAM_DIR={folder} lacks {entry.local_path} (repo {entry.repo} @ {entry.commit[:12]}: {entry.path})")
        actual = sha256_of(file)
        if actual != entry.sha256:
            raise UpstreamError(f"{file}: sha256 {actual}, the lock says {entry.sha256}")
        count += 1
    return count


def main(argv: list[str] | None = None, lock: Path = LOCK, cache: Path = CACHE) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["fetch"]:
        print("usage: python -m tests.upstream fetch", file=sys.stderr)
        return 2
    try:
        entries = list(read_lock(lock).values())
        total = sum(e.bytes for e in entries)
        if os.environ.get("UPSTREAM_DIR"):
            folder = source_dir()
            count = verify_folder(entries, folder)
            print(f"upstream: {count} files ({_mb(total)}) verified in UPSTREAM_DIR={folder}")
            return 0
        base_url = os.environ.get("UPSTREAM_BASE_URL") or DEFAULT_BASE_URL
        fetched, _ = fetch(entries, cache, base_url)
        cached = "all cached" if not fetched else f"{fetched} fetched"
        print(f"upstream: {len(entries)} files ({_mb(total)}) verified in {cache} ({cached})")
        return 0
    except UpstreamError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
