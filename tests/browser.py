"""Headless Chromium for the tests that look at a page as a person would.

Debian's ``chromium`` package: found on PATH, or installed with apt-get when missing and
this is root (as CI runs); otherwise the test that needs it is skipped, saying why. The
browser runs without network: in a network namespace of its own when ``unshare`` can make
one (root), and always with the flags that keep it from reaching out by itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

PACKAGE = "chromium"
#: Without the background-networking flags Chromium tries many connections at start.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--proxy-server=127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)


def _apt_get(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    # Wait for another apt-get (another test run on this machine) instead of failing.
    argv = ["apt-get", "-o", "DPkg::Lock::Timeout=600", *args]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1200)


def find_or_install_chromium() -> str:
    """The path of Chromium; installs Debian's package when missing and root."""
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(
            "needs Chromium (Debian: apt-get install chromium); not installed, and this is "
            "not root on a Debian-like system to install it"
        )
    done = _apt_get(["install", "-y", "--no-install-recommends", PACKAGE])
    if done.returncode != 0:
        _apt_get(["update"])
        done = _apt_get(["install", "-y", "--no-install-recommends", PACKAGE])
    found = shutil.which("chromium")
    if done.returncode != 0 or not found:
        raise RuntimeError(
            f"apt-get install {PACKAGE} failed (exit {done.returncode}), also after apt-get "
            f"update:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return found


def run_chromium(chromium: str, profile: Path, args: Sequence[str], timeout: float = 60) -> str:
    """Run headless Chromium without network; its standard output."""
    argv = [chromium, *FLAGS, f"--user-data-dir={profile}", *args]
    if os.geteuid() == 0 and shutil.which("unshare"):
        argv = ["unshare", "--net", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"chromium exited {done.returncode}: {done.stderr[-3000:]}")
    return done.stdout
