"""p4src/ on the real compiler: it compiles on both p4c generations users carry, without a
warning, and p4c's P4Info is byte for byte the committed one (which the embedded target
serves). Runs wherever a compiler is on PATH; skips, saying which, elsewhere.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MAIN_P4 = REPO / "p4src" / "hotagg.p4"
COMMITTED_P4INFO = REPO / "p4src" / "hotagg.p4info.txtpb"
# p4c 1.2.4.x (the P4 tutorials VM) and 1.2.5.x; a user's VM carries either.
COMPILERS = ["p4c-bm2-ss", "p4c-bm2-ss-1.2.5"]


@pytest.mark.parametrize("compiler", COMPILERS)
def test_compiles_without_warnings_and_p4info_matches(compiler: str, tmp_path: Path) -> None:
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} not on PATH")
    p4info = tmp_path / "hotagg.p4info.txtpb"
    result = subprocess.run(
        [compiler, "--p4v", "16", "--p4runtime-files", str(p4info),
         "-o", str(tmp_path / "hotagg.json"), str(MAIN_P4)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "warning" not in output.lower(), output
    assert p4info.read_bytes() == COMMITTED_P4INFO.read_bytes(), (
        f"{compiler}'s P4Info differs from the committed one; regenerate it with "
        "scripts/gen_p4info.py and check `make check-p4info`"
    )
