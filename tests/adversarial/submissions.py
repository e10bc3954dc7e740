"""A class of ex05_alibi submissions that attack the grader, and two honest ones.

Each hostile submission is the reference solution with one attack added, either
inside a graded function (so the grader's message records what the attack ran
into) or in a cell of its own. :func:`build_class` returns, per student, the
notebook and what grading must record: the points of every test cell, and a phrase
of the failure message (or of the reason the submission could not be graded).
The points follow from what the attack does to the function it sits in: attacks sit
in ``alibi_bias`` (which calls ``alibi_slopes``, so not the other way round); a
function that raises scores 0 in its two cells, ``alibi_slopes`` keeps its 3 points.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course_lib.grading.synthetic import solution_answers, student_notebook

A = "ex05_alibi"
CELLS = (
    "alibi_slopes__public",
    "alibi_slopes__hidden",
    "alibi_bias__public",
    "alibi_bias__hidden",
)
POINTS = dict(zip(CELLS, (1, 2, 1, 2), strict=True))
SLOPES = ("alibi_slopes__public", "alibi_slopes__hidden")
BIAS = ("alibi_bias__public", "alibi_bias__hidden")


@dataclass
class Targets:
    """What the attacks aim at (absolute host paths and a port), and the marks
    that show whether one succeeded."""

    course_root: Path
    solution_notebook: Path
    gradebook: Path
    other_submission: Path
    site_packages: Path
    home: Path
    host_tmp_file: Path
    port: int
    sleep_marker: str
    write_targets: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.write_targets = [
            self.course_root / "PWNED.txt",
            self.site_packages / "sitecustomize.py",
            self.home / f"PWNED-{self.sleep_marker}.txt",
            self.host_tmp_file,
            self.other_submission,
        ]


# A submission that reaches the library's exercise code in the grading kernel gets
# the stub's message (the grading edition's alibi_bias), or the reference trap's
# when it looks the function up during the call (the trap stands in for it then).
# "sees_only_stubs" checks that the kernel sees the stubs at all.
REFERENCE_MESSAGES = (
    "raised NotImplementedError: the function is still the stub",
    "calls the course_lib reference",
)


@dataclass
class Case:
    notebook: nbformat.NotebookNode
    cells: dict[str, int]  # points per test cell
    # phrase of the failure message of every failed cell (or one of several)
    message: str | tuple[str, ...] = ""
    ungradable: str = ""  # phrase of the reason, when the whole submission fails


def _inject(answer: str, code: str) -> str:
    """``answer`` (a function with a one-line docstring) with ``code`` run first."""
    marker = '"""\n'
    assert marker in answer, "the ex05 solution changed; update the adversarial tests"
    body = textwrap.indent(textwrap.dedent(code).strip() + "\n", "    ")
    return answer.replace(marker, marker + body, 1)


def build_class(course_root: Path, targets: Targets) -> dict[str, Case]:
    """Every student of the adversarial class (see the module docstring)."""
    source = course_root / "solutions" / A / f"{A}.ipynb"
    release = course_root / "notebooks" / A / f"{A}.ipynb"
    sol = solution_answers(source)
    slopes, bias = sol["alibi_slopes__answer"], sol["alibi_bias__answer"]
    full = dict(POINTS)
    slopes_only = {c: POINTS[c] for c in SLOPES}

    def nb(slopes_src: str = slopes, bias_src: str = bias, extra: str = ""):
        book = student_notebook(
            release,
            {"alibi_slopes__answer": slopes_src, "alibi_bias__answer": bias_src},
        )
        if extra:
            # A cell of the student's own, right after the imports.
            book.cells.insert(2, nbformat.v4.new_code_cell(textwrap.dedent(extra)))
        return book

    distance = "(pos[:, None] - pos[None, :]).abs()"
    assert distance in bias
    wrong_slopes = "def alibi_slopes(n_heads):\n    return torch.ones(n_heads)\n"
    wrong_bias = (
        "def alibi_bias(n_heads, seq_len):\n"
        "    return torch.zeros(n_heads, seq_len, seq_len)\n"
    )
    t = targets
    cases = {
        # ---- honest students: their grades must not depend on the others
        "honest_correct": Case(nb(), full),
        "honest_partial": Case(
            nb(bias_src=bias.replace(distance, "(pos[:, None] - pos[None, :])")),
            slopes_only,
            message="without the absolute value",
        ),
        # ---- reads the solutions: the file does not exist in the sandbox
        "read_solutions": Case(
            nb(
                bias_src=_inject(
                    bias,
                    f"""
                    leaked = open({str(t.solution_notebook)!r}).read()
                    print(leaked)  # into the student's own notebook
                    """,
                )
            ),
            slopes_only,
            message="FileNotFoundError",
        ),
        # ---- opens the gradebook (the course's, and the grading worker's copy)
        "gradebook": Case(
            nb(
                bias_src=_inject(
                    bias,
                    f"""
                    import sqlite3
                    for path in ({str(t.gradebook)!r}, "../../../gradebook.db"):
                        db = sqlite3.connect("file:" + path + "?mode=rw", uri=True)
                        db.execute("UPDATE grade SET manual_score = 99")
                        db.commit()
                    """,
                )
            ),
            slopes_only,
            message="unable to open database file",
        ),
        # ---- writes outside its folder: course folder, the environment, the home
        # folder, the host's /tmp, another student's submission
        "write_outside": Case(
            nb(
                bias_src=_inject(
                    bias,
                    f"""
                    blocked = []
                    for path in {[str(p) for p in t.write_targets]!r}:
                        try:
                            with open(path, "w") as f:
                                f.write("pwned")
                        except OSError as exc:
                            blocked.append(f"{{path}} ({{exc.strerror}})")
                    if blocked:
                        raise PermissionError("could not write " + "; ".join(blocked))
                    """,
                )
            ),
            slopes_only,
            message="could not write",
        ),
        # ---- opens a socket to the grader's loopback (a server of the test listens)
        "socket": Case(
            nb(
                bias_src=_inject(
                    bias,
                    f"""
                    import socket
                    address = ("127.0.0.1", {t.port})
                    with socket.create_connection(address, timeout=3) as s:
                        # only if it connected: where to (the test shows it)
                        import os
                        print("connected", os.readlink("/proc/self/ns/net"),
                              s.getsockname(), s.getpeername(),
                              open("/proc/net/tcp").read())
                        s.sendall(b"stolen")
                    """,
                )
            ),
            slopes_only,
            message="ConnectionRefusedError",
        ),
        # ---- a fork bomb: every process forks again, 2**12 processes are asked
        # for; the process limit refuses most (each refusal is counted in a pipe)
        "fork_bomb": Case(
            nb(
                bias_src=_inject(
                    bias,
                    """
                    import os
                    root, (read_end, write_end) = os.getpid(), os.pipe()
                    depth, kids = 12, []
                    while depth > 0:
                        depth -= 1
                        try:
                            pid = os.fork()
                        except OSError:
                            os.write(write_end, b"x")
                            break
                        if pid == 0:
                            kids = []  # the child forks on with what depth is left
                        else:
                            kids.append(pid)
                    for pid in kids:
                        os.waitpid(pid, 0)
                    if os.getpid() != root:
                        os._exit(0)
                    os.close(write_end)
                    refused = len(os.read(read_end, 1 << 16))
                    os.close(read_end)
                    if refused:
                        raise RuntimeError(f"{refused} forks refused by the limit")
                    """,
                )
            ),
            slopes_only,
            message="forks refused by the limit",
        ),
        # ---- allocates 30 GB
        "alloc_30gb": Case(
            nb(
                bias_src=_inject(
                    bias,
                    """
                    hog = torch.ones(30 * 2**30, dtype=torch.uint8)  # 30 GB
                    """,
                )
            ),
            slopes_only,
            message="can't allocate memory",
        ),
        # ---- sleeps forever, deaf to interrupts, with a detached child meant to
        # outlive the sandbox
        "sleeper": Case(
            nb(
                extra=f"""
                import signal, subprocess, time
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                subprocess.Popen(["sleep", "{t.sleep_marker}"], start_new_session=True)
                while True:
                    time.sleep(1)
                """
            ),
            {},
            ungradable="time limit",
        ),
        # ---- kills its parent and every other process it can see
        "kill_parent": Case(
            nb(
                bias_src=_inject(
                    bias,
                    """
                    import os, signal
                    sent = []
                    seen = [int(p) for p in os.listdir("/proc") if p.isdigit()]
                    pids = {os.getppid(), *seen}
                    for pid in sorted(pids - {os.getpid()}):
                        try:
                            os.kill(pid, signal.SIGKILL)
                            sent.append(pid)
                        except OSError:
                            pass
                    raise RuntimeError(f"sent SIGKILL to {sent}, still running")
                    """,
                )
            ),
            slopes_only,
            message="still running",
        ),
        # ---- wrong answers, graders replaced (in their module and by name)
        "tamper_grader": Case(
            nb(
                slopes_src=wrong_slopes,
                bias_src=wrong_bias,
                extra="""
                import course_lib.checks.ex05_alibi as graders
                def _always_passes(fn):
                    print("passed")
                for name in graders.__all__:
                    setattr(graders, name, _always_passes)
                grade_alibi_slopes = grade_alibi_bias = _always_passes
                """,
            ),
            {},
            message="tampering detected",
        ),
        # ---- wrong answers; torch's comparisons and the references replaced
        "tamper_torch": Case(
            nb(
                slopes_src=wrong_slopes,
                bias_src=wrong_bias,
                extra="""
                import torch, course_lib.alibi
                torch.allclose = lambda *args, **kwargs: True
                torch.equal = lambda *args, **kwargs: True
                torch.isclose = lambda a, b, **kwargs: torch.ones_like(
                    torch.as_tensor(a), dtype=torch.bool)
                torch.Tensor.__eq__ = lambda self, other: torch.ones_like(
                    self, dtype=torch.bool)
                course_lib.alibi.alibi_slopes = lambda n: torch.ones(n)
                """,
            ),
            {},
            message="tampering detected",
        ),
        # ---- right answers copied from the library, with the grader's trap for
        # library calls switched off
        "tamper_trap": Case(
            nb(
                slopes_src="from course_lib import alibi_slopes\n",
                bias_src="from course_lib import alibi_bias\n",
                extra="""
                import contextlib
                import course_lib.checks._core as core
                class _NoTrap:
                    called = []
                core.reference_trap = lambda fn: contextlib.nullcontext(_NoTrap())
                """,
            ),
            {},
            message="tampering detected",
        ),
        # ---- wrong answers; IPython set to run nothing of the test cells and to
        # hide every error
        "tamper_ipython": Case(
            nb(
                slopes_src=wrong_slopes,
                bias_src=wrong_bias,
                extra="""
                ip = get_ipython()
                def _blank_tests(lines):
                    text = "".join(lines)
                    return [] if ("check_" in text or "grade_" in text) else lines
                ip.input_transformers_post.append(_blank_tests)
                ip.set_custom_exc((BaseException,), lambda *args, **kwargs: None)
                """,
            ),
            {},
            message="tampering detected",
        ),
        # ---- delegates to the library's reference, five ways. In the sandbox the
        # kernel sees the grading edition of course_lib (no reference code), so
        # each reaches a stub: 0 for alibi_bias, alibi_slopes (honest) unchanged
        "reference_import": Case(
            nb(bias_src="from course_lib.alibi import alibi_bias\n"),
            slopes_only,
            message=REFERENCE_MESSAGES,
        ),
        "reference_computed_name": Case(
            nb(bias_src=(
                "import importlib\n"
                "def alibi_bias(n_heads, seq_len):\n"
                "    module = importlib.import_module('course_' + 'lib.alibi')\n"
                "    return module.alibi_bias(n_heads, seq_len)\n"
            )),
            slopes_only,
            message=REFERENCE_MESSAGES,
        ),
        "reference_clone_code": Case(
            nb(bias_src=(
                "import types\n"
                "import course_lib.alibi as _lib\n"
                "# the module's functions rebuilt from their code over a copy of its\n"
                "# globals, taken before any grader runs: objects the trap cannot\n"
                "# know, calling each other through the copy\n"
                "_g = dict(vars(_lib))\n"
                "for _k, _v in list(_g.items()):\n"
                "    _f = getattr(_v, '__wrapped__', _v)\n"
                "    if (isinstance(_f, types.FunctionType)\n"
                "            and _f.__module__ == _lib.__name__):\n"
                "        _c = types.FunctionType(_f.__code__, _g, _k,\n"
                "                                _f.__defaults__, _f.__closure__)\n"
                "        _c.__kwdefaults__ = _f.__kwdefaults__\n"
                "        _g[_k] = _c\n"
                "def alibi_bias(n_heads, seq_len):\n"
                "    return _g['alibi_bias'](n_heads, seq_len)\n"
            )),
            slopes_only,
            message=REFERENCE_MESSAGES,
        ),
        "reference_exec_source": Case(
            nb(bias_src=(
                "import course_lib.alibi as _lib\n"
                "_ns = {'__name__': 'copied', '__package__': 'course_lib'}\n"
                "with open(_lib.__file__) as _f:\n"
                "    exec(compile(_f.read(), 'copied', 'exec'), _ns)\n"
                "def alibi_bias(n_heads, seq_len):\n"
                "    return _ns['alibi_bias'](n_heads, seq_len)\n"
            )),
            slopes_only,
            message=REFERENCE_MESSAGES,
        ),
        "reference_site_packages": Case(
            nb(bias_src=(
                "import importlib.util, os, sys\n"
                "_spec = importlib.util.find_spec('course_lib')\n"
                "_here = os.path.dirname(_spec.origin)\n"
                "_files = [os.path.join(_here, 'alibi.py')]\n"
                "_files += [os.path.join(p, 'course_lib', 'alibi.py')\n"
                "           for p in sys.path]\n"
                "_ns = {'__name__': 'copied', '__package__': 'course_lib'}\n"
                "_found = [f for f in _files if os.path.isfile(f)]\n"
                "with open(_found[0]) as _f:\n"
                "    exec(compile(_f.read(), _found[0], 'exec'), _ns)\n"
                "def alibi_bias(n_heads, seq_len):\n"
                "    return _ns['alibi_bias'](n_heads, seq_len)\n"
            )),
            slopes_only,
            message=REFERENCE_MESSAGES,
        ),
        # ---- an honest alibi_bias that fails if the kernel can see the library's
        # implementation of it: full marks only when the kernel sees the stub
        "sees_only_stubs": Case(
            nb(
                bias_src=_inject(
                    bias,
                    """
                    if not LIBRARY_IS_STUB:
                        raise RuntimeError("the kernel sees the reference")
                    """,
                ),
                # read before any grader runs (during a call the trap stands in
                # for the library's functions)
                extra="""
                import inspect, course_lib.alibi
                LIBRARY_IS_STUB = "raise NotImplementedError" in inspect.getsource(
                    course_lib.alibi.alibi_bias)
                """,
            ),
            full,
        ),
        # ---- prints 30 MB
        "big_output": Case(
            nb(extra='print("spam " * 6_000_000)\n'),
            full,
        ),
    }
    return cases
