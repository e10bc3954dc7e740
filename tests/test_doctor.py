"""``course doctor``: its decisions on simulated machines (injected probe results:
bubblewrap missing, user namespaces off, Ubuntu's AppArmor restriction, packages
missing), and one real run on this machine, which grades in the tests and so must
be reported ready."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import ROOT, course_cli

from course_lib.grading.kernels import doctor
from course_lib.grading.kernels.doctor import (
    APPARMOR_USERNS,
    MAX_USERNS,
    USERNS_CLONE,
    Facts,
    diagnose,
    format_report,
    ready,
)

# A Debian machine where everything works (the sysctls as Debian 12 ships them).
GOOD = Facts(
    system="Linux",
    bwrap="/usr/bin/bwrap",
    sysctls={USERNS_CLONE: "1", MAX_USERNS: "63000", APPARMOR_USERNS: None},
    unshare=(True, ""),
    sandbox=None,
    packages={},
)
NO_USERNS = "a test sandbox failed: bwrap: No permissions to creating new namespace"


def _failed(facts: Facts) -> dict[str, str]:
    """name -> fix of each failed check."""
    return {c.name: c.fix for c in diagnose(facts) if not c.ok}


def test_a_good_machine_is_ready() -> None:
    checks = diagnose(GOOD)
    assert ready(checks) and all(c.ok for c in checks)
    assert [c.name for c in checks] == [
        "system",
        "bubblewrap",
        "user namespaces",
        "grading sandbox",
        "packages",
    ]
    assert format_report(checks).splitlines()[-1].startswith("ready to grade")


def test_missing_bubblewrap_says_how_to_install_it() -> None:
    facts = dataclasses.replace(GOOD, bwrap=None, sandbox=None)
    checks = diagnose(facts)
    assert not ready(checks)
    failed = _failed(facts)
    assert set(failed) == {"bubblewrap", "grading sandbox"}
    assert "apt-get install bubblewrap" in failed["bubblewrap"]
    assert "dnf install bubblewrap" in failed["bubblewrap"]
    report = format_report(checks)
    assert report.splitlines()[-1].startswith("NOT ready to grade")
    # one line per check, each failed one with its fix on the same line
    assert len(report.splitlines()) == len(checks) + 1
    assert all("->" in line for line in report.splitlines() if line.startswith("FIX"))


@pytest.mark.parametrize(
    ("setting", "value", "fix"),
    [
        (USERNS_CLONE, "0", f"sudo sysctl -w {USERNS_CLONE}=1"),
        (MAX_USERNS, "0", f"sudo sysctl -w {MAX_USERNS}=15000"),
    ],
)
def test_user_namespaces_turned_off(setting: str, value: str, fix: str) -> None:
    facts = dataclasses.replace(
        GOOD,
        sysctls={**GOOD.sysctls, setting: value},
        unshare=(False, "unshare: unshare failed: Operation not permitted"),
        sandbox=NO_USERNS,
    )
    checks = diagnose(facts)
    assert not ready(checks)
    failed = _failed(facts)
    assert set(failed) == {"user namespaces", "grading sandbox"}
    assert fix in failed["user namespaces"]
    assert "/etc/sysctl.d/" in failed["user namespaces"]  # and how to keep it
    # the sandbox's own reason is shown
    assert NO_USERNS in format_report(checks)


def test_both_missing_are_reported_together() -> None:
    """bubblewrap missing and namespaces off: both fixes at once, not one per run."""
    facts = dataclasses.replace(
        GOOD,
        bwrap=None,
        sandbox=None,
        sysctls={**GOOD.sysctls, USERNS_CLONE: "0"},
        unshare=(False, "Operation not permitted"),
    )
    assert set(_failed(facts)) == {"bubblewrap", "user namespaces", "grading sandbox"}


def test_ubuntu_apparmor_restriction_blocks_without_a_profile() -> None:
    facts = dataclasses.replace(
        GOOD,
        sysctls={USERNS_CLONE: "1", MAX_USERNS: "63000", APPARMOR_USERNS: "1"},
        unshare=(
            False,
            "unshare: write failed /proc/self/uid_map: Operation not permitted",
        ),
        sandbox="a test sandbox failed: bwrap: setting up uid map: Permission denied",
    )
    checks = diagnose(facts)
    assert not ready(checks)
    fix = _failed(facts)["AppArmor"]
    # Canonical's two fixes: a profile that grants userns to bwrap, or the sysctl
    assert "profile bwrap /usr/bin/bwrap flags=(unconfined)" in fix
    assert "userns," in fix and "apparmor_parser -r /etc/apparmor.d/bwrap" in fix
    assert f"sysctl -w {APPARMOR_USERNS}=0" in fix
    # the fix is one line of shell
    (line,) = [ln for ln in format_report(checks).splitlines() if "AppArmor" in ln]
    assert "\n" not in line


def test_apparmor_with_a_bwrap_profile_is_fine() -> None:
    """Restricted, but bwrap has its profile: unshare fails, the sandbox works."""
    facts = dataclasses.replace(
        GOOD,
        sysctls={USERNS_CLONE: "1", MAX_USERNS: "63000", APPARMOR_USERNS: "1"},
        unshare=(False, "Operation not permitted"),
        sandbox=None,
    )
    checks = diagnose(facts)
    assert ready(checks)
    (apparmor,) = [c for c in checks if c.name == "AppArmor"]
    assert apparmor.ok and "bwrap is allowed" in apparmor.found


def test_unshare_failing_for_another_reason() -> None:
    """No sysctl forbids it, yet no namespace can be made (a container's seccomp
    profile): the report says so instead of blaming a setting."""
    facts = dataclasses.replace(
        GOOD,
        unshare=(False, "unshare: unshare failed: Operation not permitted"),
        sandbox=NO_USERNS,
    )
    failed = _failed(facts)
    assert "container" in failed["user namespaces"]


def test_not_linux() -> None:
    facts = Facts(system="Darwin", bwrap=None, unshare=None, sandbox=None)
    checks = diagnose(facts)
    assert not ready(checks)
    assert _failed(facts).keys() == {"system"}
    assert "Linux" in _failed(facts)["system"]


def test_packages_and_student_edition() -> None:
    facts = dataclasses.replace(
        GOOD,
        packages={"nbgrader==0.9.6": "", "nh3>=0.2.17": "0.2.1"},
        instructor_package=False,
    )
    checks = diagnose(facts)
    assert not ready(checks)
    failed = _failed(facts)
    assert "student wheel" in failed["course_lib"]
    (packages,) = [c for c in checks if c.name == "packages"]
    assert "nbgrader==0.9.6 (missing)" in packages.found
    assert "nh3>=0.2.17 (0.2.1)" in packages.found
    assert "constraints.txt" in packages.fix


def test_gather_asks_the_sandbox_probe_only_with_bwrap(monkeypatch) -> None:
    """The verdict on the sandbox is sandbox.py's probe; with no bwrap it is not
    asked (it would only repeat that bwrap is missing)."""
    asked = []

    def probe():
        asked.append(1)
        return "probe said no"

    facts = doctor.gather(probe)
    assert asked == [1] and facts.sandbox == "probe said no"
    from course_lib.grading.kernels import sandbox

    def missing(self):
        raise sandbox.SandboxError("no bwrap")

    monkeypatch.setattr(sandbox.SandboxLauncher, "bwrap_path", missing)
    facts = doctor.gather(probe)
    assert facts.bwrap is None and facts.sandbox is None and asked == [1]


def test_gather_finds_a_missing_requirement(monkeypatch) -> None:
    real = doctor.metadata.version

    def version(name):
        if name == "nbgrader":
            raise doctor.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(doctor.metadata, "version", version)
    facts = doctor.gather(lambda: None)
    assert facts.packages == {"nbgrader==0.9.6": ""}


def test_this_machine_is_ready() -> None:
    """The real thing: this machine grades in the tests, so course doctor says it is
    ready, from its real probes (the sandbox built, the packages installed)."""
    proc = course_cli("doctor", cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("ready to grade"), proc.stdout
    assert not [ln for ln in lines if ln.startswith("FIX")]
    names = {ln.split()[1] for ln in lines[:-1]}
    assert {"system", "bubblewrap", "grading", "packages"} <= names
