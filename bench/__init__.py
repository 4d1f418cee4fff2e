"""Benchmarks that write JSON (`make bench`); nothing here asserts on time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(result: Any, out: Path | None) -> None:
    """Print `result` as JSON, and write it to `out` too when one is given."""
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
