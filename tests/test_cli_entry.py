"""How irflow is started and installed: ``python -m irflow``, ``-V``, one version, install hints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import irflow
from irflow.util import extras
from irflow.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_python_dash_m_irflow_runs_the_cli():
    done = subprocess.run([sys.executable, "-m", "irflow", "--version"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"irflow {irflow.__version__}"
    done = subprocess.run([sys.executable, "-m", "irflow", "recipes"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0 and "hybrid:" in done.stdout


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_flags(flag):
    result = CliRunner().invoke(main, [flag])
    assert result.exit_code == 0 and result.output.strip() == f"irflow {irflow.__version__}"


def test_the_version_is_written_once():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert not re.search(r'^version\s*=\s*"', pyproject, flags=re.M), "pyproject.toml must not repeat the version"
    assert re.search(r'^dynamic = \["version"\]', pyproject, flags=re.M)
    assert 'version = { attr = "irflow.__version__" }' in pyproject
    from importlib.metadata import version

    assert version("irflow") == irflow.__version__


def test_install_hint_from_a_source_checkout_installs_the_checkout(monkeypatch):
    extras.install_hint.cache_clear()
    monkeypatch.setattr(extras, "_checkout", lambda: Path("/src/my irflow"))
    try:
        assert extras.install_hint("st") == "cd '/src/my irflow' && pip install -e '.[st]'"
    finally:
        extras.install_hint.cache_clear()


@pytest.mark.parametrize("direct_url, expected", [
    (None, "pip install 'irflow[st]'"),                                         # from an index
    ({"url": "file:///opt/irflow-src", "dir_info": {}}, "pip install '/opt/irflow-src[st]'"),  # pip install /opt/..
    ({"url": "https://example.org/irflow.tar.gz", "archive_info": {}}, "pip install 'irflow[st]'"),
])
def test_install_hint_for_installed_copies(monkeypatch, direct_url, expected):
    extras.install_hint.cache_clear()
    monkeypatch.setattr(extras, "_checkout", lambda: None)
    monkeypatch.setattr(extras, "_direct_url", lambda: direct_url)
    try:
        assert extras.install_hint("st") == expected
    finally:
        extras.install_hint.cache_clear()


def test_this_checkout_gets_the_editable_hint():
    extras.install_hint.cache_clear()
    assert extras.install_hint("st").endswith("&& pip install -e '.[st]'")
    assert str(ROOT) in extras.install_hint("st")


def test_no_hint_names_the_index_form_directly():
    # every hint goes through install_hint; a literal "irflow[st]" in the code would be wrong from a checkout
    offenders = [str(p.relative_to(ROOT)) for folder in ("irflow", "stages", "recipes") for p in (ROOT / folder).rglob("*.py")
                 if p.name != "extras.py" and "irflow[" in p.read_text(encoding="utf-8")]
    assert offenders == []
