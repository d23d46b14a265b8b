"""docs/pylance-parity.md is what scripts/gen_parity.py renders from pylance and lance-ops today."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_parity_table_is_current():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_parity.py"), "--check"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_parity_table_rows_say_why():
    text = (ROOT / "docs" / "pylance-parity.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) > 200
    assert "| `lance.file.LanceFileReader.read_all` | supported |" in text
    assert "| `lance.LanceDataset.create_index` | not supported |  | out of scope: vector search" in text
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        if cells[1] == "not supported":
            assert cells[3], row  # every unsupported row says why
