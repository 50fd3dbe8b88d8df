"""The code base passes the project's lint rules ([tool.ruff] in pyproject.toml)."""

import subprocess
import sys

from conftest import ROOT


def test_ruff_check_passes():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise",
                          "jaxsim", "tests", "scripts", "docs"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
