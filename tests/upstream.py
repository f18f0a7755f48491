"""`python -m tests.upstream fetch` (the first step of `make test`): fill the cache of the pinned upstream
files from tests/upstream.lock.tsv, or verify UPSTREAM_DIR. The lock's reader, fetcher and resolver are
components/upstream.py, which the program's offline chart stand-in reads too."""

import sys

from components.upstream import main

if __name__ == "__main__":
    sys.exit(main())
