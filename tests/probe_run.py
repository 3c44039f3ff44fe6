"""Run a probe script under another environment (the patched engine's) and read its JSON lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def run_probe(script: Path, *args: str, env: dict[str, str]) -> list[dict]:
    """The JSON objects ``script`` prints, one per line (it must exit 0; its stderr tail is the failure)."""
    r = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stderr[-3000:]
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
