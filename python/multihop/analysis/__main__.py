"""``python -m multihop.analysis TRACES... [-o REPORT_DIR] [--master URL] [--baseline CASE]``."""

from __future__ import annotations

import sys

from multihop.analysis.command import main

if __name__ == "__main__":
    sys.exit(main())
