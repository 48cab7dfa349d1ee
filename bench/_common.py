"""What the benchmark scripts share, for the scripts run as ``python bench/<name>.py``
(bench/ on the path, not the repository): puts the repository on the path and
names the harness's pieces (tests/harness/) the way the scripts use them.

The database is ``MEMPROJ_BENCH_DB`` if set (a full PostgreSQL URL), else a
``memproj_bench`` database created on the embedded server next to ``memproj``
(tests/harness/stack.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

from tests.harness.measure.timing import percentile, summary, timed  # noqa: E402
from tests.harness.paths import VAR_BENCH  # noqa: E402
from tests.harness.reports.tables import markdown_table as table  # noqa: E402
from tests.harness.stack import BENCH_DB_NAME  # noqa: E402
from tests.harness.stack import setup_bench_django as setup_django  # noqa: E402

__all__ = ["BASE_DIR", "BENCH_DB_NAME", "VAR_BENCH", "percentile", "setup_django", "summary", "table", "timed"]
