"""The Linux installer's refusals, run as a program: a prefix that is not ours, a missing CA
file, each before anything is installed."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.project.test_installers import DEPS, LINUX, desktop_env, files_under, sh
from tests.harness import base_env


def test_a_prefix_that_is_not_ours_is_refused(tmp_path: Path) -> None:
    # Uninstalling removes the prefix whole, so installing into someone else's folder is refused.
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "someone-elses.txt").write_text("keep me")
    env = {k: v for k, v in base_env(tmp_path).items() if not k.startswith("XDG_")}
    env["HOME"] = str(tmp_path / "home")
    install = [LINUX / "install.sh", "--desktop", "--deps-from", DEPS, "--skip-doctor"]
    done = sh(*install, "--prefix", taken, "--coordinator", "127.0.0.1:1", "--token", "x", env=env)
    assert (done.returncode, done.stdout) == (1, "")
    assert "holds something other than deskfleet" in done.stderr
    assert files_under(taken) == ["someone-elses.txt"]
    done = sh(*install, "--destdir", tmp_path / "root", "--prefix", "/usr", env=env)
    assert (done.returncode, done.stdout) == (1, "")
    assert "choose a folder of its own" in done.stderr


def test_a_missing_ca_file_is_refused_before_anything_is_installed(tmp_path: Path) -> None:
    env = desktop_env(tmp_path)
    prefix = tmp_path / "prefix"
    missing = tmp_path / "nowhere" / "ca.pem"
    done = sh(
        *(LINUX / "install.sh", "--desktop", "--prefix", prefix, "--deps-from", DEPS),
        *("--coordinator", "fleet.example:50051", "--token", "dfe_x", "--ca-file", missing),
        env=env,
    )
    assert (done.returncode, done.stdout) == (1, "")
    # One line (as root, the desktop-as-root warning comes before it).
    assert done.stderr.splitlines()[-1] == (
        f"deskfleet install: --ca-file {missing}: no such file (the coordinator's ca.pem)"
    )
    assert not prefix.exists()
