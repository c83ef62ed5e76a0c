"""The pool's part of the task program, copied into its bundles beside the worker package
(`python -m dtgui_pool_task` from the bundle: which pool the bundle was sent to)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    print(json.loads(Path("pool.json").read_text(encoding="utf-8"))["pool"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
