"""``course doctor``: can this machine grade, and if not, what to do about it.

Grading runs every student's notebook in the bubblewrap sandbox of
:mod:`.sandbox`, which needs Linux, the ``bwrap`` program and unprivileged user
namespaces, and it runs nbgrader and the rest of the ``grading`` extra. This module
gathers those facts (:func:`gather`), decides from them alone what is missing
(:func:`diagnose`, a pure function, so that its decisions are tested on simulated
machines) and prints one line per check, each failed one with the command that fixes
it (:func:`format_report`).

The verdict on the sandbox is :func:`.sandbox.sandbox_problem`'s, the probe
``course autograde`` itself runs (a tiny sandbox built as grading builds it, checked
from inside for the host's network and files); whether ``bwrap`` is there is
:meth:`.sandbox.SandboxLauncher.bwrap_path`'s answer. What this module adds is the
*why* when the sandbox cannot be built, read from the kernel's settings:

* ``kernel.unprivileged_userns_clone`` (a Debian kernel patch: ``0`` turns
  unprivileged user namespaces off, as older Debian kernels did by default);
* ``user.max_user_namespaces`` (upstream Linux, ``Documentation/admin-guide/
  sysctl/user.rst``: ``0`` forbids creating user namespaces; RHEL 7 shipped ``0``);
* ``kernel.apparmor_restrict_unprivileged_userns`` (Ubuntu 23.10 and later, on by
  default since 24.04): ``1`` lets only programs whose AppArmor profile grants
  ``userns`` create one. The fixes are Canonical's: a profile for the program
  (``flags=(unconfined)`` with the ``userns,`` rule) or the sysctl set to ``0``
  (Ubuntu blog, "Restricted unprivileged user namespaces are coming to Ubuntu
  23.10", https://ubuntu.com/blog/ubuntu-23-10-restricted-unprivileged-user-namespaces;
  spec SE045, https://discourse.ubuntu.com/t/37626);

and from ``unshare --user --map-root-user true`` (util-linux), which creates a user
namespace outside any AppArmor profile of bubblewrap: it failing while the sandbox
works is the AppArmor case with a profile in place, which is fine.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata

__all__ = ["Check", "Facts", "diagnose", "format_report", "gather", "ready"]

# The kernel settings that decide whether an unprivileged process may create a user
# namespace (see the module docstring for what each one means and its source).
USERNS_CLONE = "kernel.unprivileged_userns_clone"
MAX_USERNS = "user.max_user_namespaces"
APPARMOR_USERNS = "kernel.apparmor_restrict_unprivileged_userns"
SYSCTLS = (USERNS_CLONE, MAX_USERNS, APPARMOR_USERNS)

# What `course autograde` needs of the installation: the core and the grading extra
# of course_lib's own metadata (pyproject.toml), and the instructor's package
# (the student wheel has no course_lib.grading.autograde).
EXTRA = "grading"
INSTRUCTOR_MODULE = "course_lib.grading.autograde"
INSTALL_FIX = (
    "in the course folder: make setup (or pip install -c constraints.txt -e "
    "'.[grading]')"
)


@dataclass(frozen=True)
class Facts:
    """What was found on the machine; each probe's raw answer.

    ``bwrap``: the program's path, or ``None`` when it is missing.
    ``sysctls``: name -> value as the kernel shows it, ``None`` when the kernel has
    no such setting. ``unshare``: ``(worked, message)`` of ``unshare --user
    --map-root-user true``, or ``None`` when ``unshare`` is not installed.
    ``sandbox``: :func:`.sandbox.sandbox_problem`'s answer (``None``: it works),
    not asked when ``bwrap`` is missing. ``packages``: requirement -> the installed
    version that fails it (``""`` when not installed); only the failing ones.
    """

    system: str = "Linux"
    root: bool = False
    bwrap: str | None = "/usr/bin/bwrap"
    sysctls: dict[str, str | None] = field(default_factory=dict)
    unshare: tuple[bool, str] | None = (True, "")
    sandbox: str | None = None
    packages: dict[str, str] = field(default_factory=dict)
    instructor_package: bool = True


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, whether it is fine, what was
    found and, when it is not fine, the one command or step that fixes it."""

    name: str
    ok: bool
    found: str
    fix: str = ""
    blocking: bool = True  # a failure that stops grading (else: a note)


# --------------------------------------------------------------------------------------
# gathering the facts


def _sysctl(name: str) -> str | None:
    path = "/proc/sys/" + name.replace(".", "/")
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _unshare() -> tuple[bool, str] | None:
    program = shutil.which("unshare")
    if program is None:
        return None
    try:
        run = subprocess.run(
            [program, "--user", "--map-root-user", "true"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, str(exc)
    message = (run.stderr or run.stdout).strip().splitlines()
    return run.returncode == 0, message[-1] if message else ""


def _failing_requirements() -> dict[str, str]:
    """Each requirement of course_lib (core and the grading extra) that is not
    met, with the version found ("" when not installed)."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    env = {**default_environment(), "extra": EXTRA}
    failing = {}
    try:
        requires = metadata.requires("course_lib") or []
    except metadata.PackageNotFoundError:  # run from a folder, not installed
        return {"course_lib": ""}
    for text in requires:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            failing[f"{req.name}{req.specifier}"] = ""
            continue
        if not req.specifier.contains(version, prereleases=True):
            failing[f"{req.name}{req.specifier}"] = version
    return failing


def gather(
    sandbox_problem: Callable[[], str | None] | None = None,
) -> Facts:
    """The facts of this machine. ``sandbox_problem``: the sandbox probe (default
    :func:`.sandbox.sandbox_problem` with grading's default settings)."""
    from .sandbox import SandboxError, SandboxLauncher
    from .sandbox import sandbox_problem as probe

    system = platform.system()
    if system != "Linux":
        return Facts(
            system=system,
            bwrap=None,
            unshare=None,
            sandbox=None,
            packages=_failing_requirements(),
            instructor_package=_has_instructor_package(),
        )
    try:
        bwrap = SandboxLauncher().bwrap_path()
    except SandboxError:
        bwrap = None
    return Facts(
        system=system,
        root=os.geteuid() == 0,
        bwrap=bwrap,
        sysctls={name: _sysctl(name) for name in SYSCTLS},
        unshare=_unshare(),
        sandbox=(sandbox_problem or probe)() if bwrap else None,
        packages=_failing_requirements(),
        instructor_package=_has_instructor_package(),
    )


def _has_instructor_package() -> bool:
    try:
        return importlib.util.find_spec(INSTRUCTOR_MODULE) is not None
    except ModuleNotFoundError:
        return False


# --------------------------------------------------------------------------------------
# deciding


def _apparmor_fix(bwrap: str) -> str:
    profile = (
        "abi <abi/4.0>,\\ninclude <tunables/global>\\n"
        f"profile bwrap {bwrap} flags=(unconfined) {{\\n  userns,\\n}}\\n"
    )
    return (
        f"printf '{profile}' | sudo tee /etc/apparmor.d/bwrap && sudo "
        "apparmor_parser -r /etc/apparmor.d/bwrap   (or, for every program: sudo "
        f"sysctl -w {APPARMOR_USERNS}=0)"
    )


def _userns_blockers(facts: Facts) -> list[Check]:
    """The kernel settings that forbid unprivileged user namespaces, each with its
    fix; empty when none does."""
    found = []
    sysctls = facts.sysctls
    if sysctls.get(USERNS_CLONE) == "0":
        found.append(
            Check(
                "user namespaces",
                False,
                f"{USERNS_CLONE} = 0 (turned off)",
                f"sudo sysctl -w {USERNS_CLONE}=1, and the same line in "
                "/etc/sysctl.d/90-userns.conf to keep it",
            )
        )
    if sysctls.get(MAX_USERNS) == "0":
        found.append(
            Check(
                "user namespaces",
                False,
                f"{MAX_USERNS} = 0 (none may be created)",
                f"sudo sysctl -w {MAX_USERNS}=15000, and the same line in "
                "/etc/sysctl.d/90-userns.conf to keep it",
            )
        )
    if sysctls.get(APPARMOR_USERNS) == "1":
        found.append(
            Check(
                "AppArmor",
                False,
                f"{APPARMOR_USERNS} = 1 (Ubuntu: only programs with an AppArmor "
                "profile that allows it may create user namespaces)",
                _apparmor_fix(facts.bwrap or "/usr/bin/bwrap"),
            )
        )
    return found


def _bwrap_check(facts: Facts) -> Check:
    if facts.bwrap:
        return Check("bubblewrap", True, facts.bwrap)
    return Check(
        "bubblewrap",
        False,
        "the bwrap program is not installed",
        "sudo apt-get install bubblewrap (Debian, Ubuntu) or sudo dnf install "
        "bubblewrap (Fedora, RHEL)",
    )


def _userns_checks(facts: Facts) -> list[Check]:
    """What the kernel allows, and what ``unshare`` saw."""
    blockers = _userns_blockers(facts)
    sandbox_works = facts.bwrap is not None and facts.sandbox is None
    if sandbox_works:
        # The sandbox was built, so nothing above stopped it (an AppArmor profile
        # lets bwrap through): a note, not a failure.
        notes = [
            Check(c.name, True, c.found + "; bwrap is allowed (the sandbox works)")
            for c in blockers
        ]
        return notes or [Check("user namespaces", True, "allowed")]
    if blockers:
        return blockers
    if facts.unshare is not None and not facts.unshare[0]:
        return [
            Check(
                "user namespaces",
                False,
                f"unshare --user --map-root-user true failed: {facts.unshare[1]}",
                "allow unprivileged user namespaces for bwrap (a container's seccomp "
                "or AppArmor profile may forbid them: run grading unconfined, or on a "
                "machine or VM of its own)",
            )
        ]
    return [Check("user namespaces", True, "allowed (unshare works)")]


def _sandbox_check(facts: Facts) -> Check:
    if facts.bwrap is None:
        return Check(
            "grading sandbox",
            False,
            "not tried: bubblewrap is missing",
            "install bubblewrap (above), then run course doctor again",
        )
    if facts.sandbox is None:
        user = " (as the user nobody: you are root)" if facts.root else ""
        return Check(
            "grading sandbox",
            True,
            f"a test sandbox has no network and no host files{user}",
        )
    return Check(
        "grading sandbox",
        False,
        facts.sandbox,
        "fix the lines above; course autograde refuses to grade until this passes",
    )


def _package_checks(facts: Facts) -> list[Check]:
    checks = []
    if not facts.instructor_package:
        checks.append(
            Check(
                "course_lib",
                False,
                "this is the student edition (no grading tool)",
                "install the full course, not the student wheel: " + INSTALL_FIX,
            )
        )
    if facts.packages:
        found = ", ".join(
            f"{req} ({version or 'missing'})"
            for req, version in sorted(facts.packages.items())
        )
        checks.append(Check("packages", False, found, INSTALL_FIX))
    if not checks:
        checks.append(
            Check("packages", True, f"course_lib and its '{EXTRA}' extra are installed")
        )
    return checks


def diagnose(facts: Facts) -> list[Check]:
    """One :class:`Check` per line of the report, in the order to fix them."""
    if facts.system != "Linux":
        return [
            Check(
                "system",
                False,
                f"{facts.system}: the sandbox needs Linux",
                "grade on a Linux machine or a Linux VM (WSL 2 and a Linux VM "
                "on macOS work)",
            ),
            *_package_checks(facts),
        ]
    return [
        Check("system", True, "Linux"),
        _bwrap_check(facts),
        *_userns_checks(facts),
        _sandbox_check(facts),
        *_package_checks(facts),
    ]


def ready(checks: list[Check]) -> bool:
    """Whether ``course autograde`` can grade with its sandbox on this machine."""
    return all(c.ok or not c.blocking for c in checks)


def format_report(checks: list[Check]) -> str:
    """One line per check (``ok`` or ``FIX``), each failed one with its fix; then
    the verdict."""
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        mark = "ok " if c.ok else "FIX"
        line = f"{mark}  {c.name:<{width}}  {c.found}"
        if not c.ok and c.fix:
            line += f"  ->  {c.fix}"
        lines.append(line)
    if ready(checks):
        lines.append(
            "ready to grade: course autograde will run every kernel in the sandbox"
        )
    else:
        lines.append(
            "NOT ready to grade: fix each FIX line, then run course doctor again"
        )
    return "\n".join(lines)
