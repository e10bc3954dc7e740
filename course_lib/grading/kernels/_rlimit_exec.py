"""Set resource limits on this process, then become the given command.

Run as a script (``python -I -S _rlimit_exec.py AS_BYTES CPU_SECONDS OWNER -- CMD...``)
by :class:`course_lib.grading.kernels.start.RlimitLauncher`: the limits are inherited
by the Jupyter kernel it execs into. ``0`` means no limit. The kernel also inherits a
parent-death signal: it is killed (SIGKILL) when its owner, process ``OWNER``, exits,
however it exits. Standard library only, so it starts in milliseconds.
"""

from __future__ import annotations

import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves it off
from _lifetime import die_with_parent  # noqa: E402

del sys.path[0]


def _set(limit: int, value: int) -> None:
    if value > 0:
        resource.setrlimit(limit, (value, value))


def main(argv: list[str]) -> None:
    """Apply ``argv = [AS_BYTES, CPU_SECONDS, OWNER, "--", *command]`` and exec the
    command."""
    if len(argv) < 5 or argv[3] != "--":
        sys.exit("usage: _rlimit_exec.py AS_BYTES CPU_SECONDS OWNER -- COMMAND...")
    address_space, cpu, owner = int(argv[0]), int(argv[1]), int(argv[2])
    command = argv[4:]
    die_with_parent(owner)
    _set(resource.RLIMIT_AS, address_space)
    if cpu > 0:
        # The soft limit sends SIGXCPU (the kernel dies); the hard one a second later
        # sends SIGKILL in case SIGXCPU is ignored.
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
