"""The ``course`` command: check a notebook (students), release, collect, autograde,
give feedback and report grades (instructors), run the lab.

Every instructor command wraps nbgrader (``generate_assignment``, ``autograde``,
``generate_feedback``) and reads the course's ``nbgrader_config.py``; see
``course <command> --help`` and the instructor guide in the book.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

__all__ = ["build_parser", "main"]

_EPILOG = """\
students:
  course check notebooks/ex05_alibi/ex05_alibi.ipynb

instructors (in the course folder, the one with nbgrader_config.py):
  course release all
  course roster gradebook_export.csv
  course collect downloads.zip --assignment ex05
  course extend alice ex05 --days 2
  course autograde ex05 --jobs 2
  course feedback ex05
  course report ex05
  course similarity ex05

Assignments can be named by their id (ex05_alibi) or its prefix (ex05).
"""


def _version() -> str:
    """The installed version of course_lib (the source tree's when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("course_lib")
    except PackageNotFoundError:
        from . import __version__

        return __version__


def _progress_wanted(args) -> bool:
    """A progress bar only for a person watching: not with --quiet or --no-progress,
    and not when stderr goes to a file or a pipe (a log full of bar redraws)."""
    if getattr(args, "quiet", False) or getattr(args, "no_progress", False):
        return False
    return sys.stderr.isatty()


def _regex(text: str):
    import re

    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {exc}") from None
    if "student" not in pattern.groupindex:
        raise argparse.ArgumentTypeError(
            "the pattern needs a named group for the student id: (?P<student>...)"
        )
    return pattern


def _positive_float(text: str) -> float | None:
    if text.strip().lower() in {"none", "0", "unlimited"}:
        return None
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _memory(text: str) -> int | None:
    from .grading.kernels.start import parse_bytes

    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _LazyVersion(argparse._VersionAction):
    """``--version``, which looks the version up only when asked (the installed
    package's metadata: a scan of the environment every command would pay)."""

    def __call__(self, parser, namespace, values, option_string=None):
        self.version = f"%(prog)s {_version()}"
        super().__call__(parser, namespace, values, option_string)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (exit status 2)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``course`` (one sub-command per step)."""
    parser = _Parser(
        prog="course",
        description=(
            "Positional Encodings in Transformers: check exercise notebooks, and "
            "release, collect, autograde, give feedback on and report the exercises "
            "of a class (built on nbgrader)."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_LazyVersion)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    quiet_opts, course_opts = _shared_options()
    _add_check(sub)
    _add_release(sub, quiet_opts, course_opts)
    _add_roster(sub, quiet_opts, course_opts)
    _add_collect(sub, quiet_opts, course_opts)
    _add_extend(sub, course_opts)
    _add_autograde(sub, quiet_opts, course_opts)
    _add_feedback(sub, quiet_opts, course_opts)
    _add_report(sub, quiet_opts, course_opts)
    _add_similarity(sub, course_opts)
    _add_publish(sub)
    _add_term(sub, course_opts)
    _add_doctor(sub)
    _add_lab(sub)
    return parser


def _shared_options() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The options several commands share: ``--quiet``; ``--root`` and ``--db``."""
    quiet_opts = _Parser(add_help=False)
    quiet_opts.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="print only the summary line and what went wrong (no progress bar, "
        "no line per submission)",
    )

    course_opts = _Parser(add_help=False)
    course_opts.add_argument(
        "--root",
        metavar="DIR",
        help="course folder (default: the nearest folder with nbgrader_config.py "
        "at or above the working directory)",
    )
    course_opts.add_argument(
        "--db",
        metavar="URL",
        help="gradebook as an SQLAlchemy URL, e.g. sqlite:///gradebook.db or "
        "postgresql+psycopg://user@host/db (default: nbgrader_config.py)",
    )
    return quiet_opts, course_opts


def _add_check(sub) -> None:
    """The ``course check`` command."""
    p = sub.add_parser(
        "check",
        help="run a notebook and report its public checks (students)",
        description="Run the notebook from a temporary copy, with its folder as the "
        "working directory, and report each exercise's public check: pass or fail "
        "with the grader's message. Exits with 1 when a check fails.",
    )
    p.add_argument("notebook", type=Path, help="the .ipynb file")
    p.add_argument(
        "--timeout",
        type=int,
        default=None,
        metavar="S",
        help="seconds each cell may run (default: from the course's table of time "
        "limits for the assignment the notebook is named after, else 120); each "
        "checked function gets the assignment's own limit inside the kernel",
    )
    p.add_argument(
        "--memory",
        type=_memory,
        default=4 << 30,
        metavar="SIZE",
        help="memory limit of the kernel, e.g. 4G (default), or none",
    )
    p.add_argument(
        "--hint",
        action="store_true",
        help="after a known mistake, also say how to fix it (the second level of "
        "the checks' messages; sets COURSE_HINTS=1 in the kernel)",
    )


def _add_release(sub, quiet_opts, course_opts) -> None:
    """The ``course release`` command."""
    p = sub.add_parser(
        "release",
        parents=[course_opts, quiet_opts],
        help="generate student notebooks (nbgrader generate_assignment)",
        description="Run nbgrader generate_assignment (forced) for one assignment or "
        "all: solutions/<id>/ -> notebooks/<id>/, and record the assignment in the "
        "gradebook (created if missing). The term in nbgrader_config.py "
        "(c.CourseTerm.variants, c.CourseTerm.seed) picks each exercise's variant "
        "and draws the hidden cases; an unknown exercise or variant is refused.",
    )
    p.add_argument(
        "assignment",
        nargs="?",
        default="all",
        help="assignment id or prefix (ex05), or 'all' (default)",
    )


def _add_collect(sub, quiet_opts, course_opts) -> None:
    """The ``course collect`` command."""
    p = sub.add_parser(
        "collect",
        parents=[course_opts, quiet_opts],
        help="place downloaded submissions into submitted/<student>/<assignment>/",
        description="Place the notebooks of a folder or zip file into nbgrader's "
        "submitted/<student>/<assignment>/<assignment>.ipynb, taking student ids "
        "from the names (alice_ex05_alibi.ipynb, alice/ex05_alibi.ipynb, the "
        "download names of Canvas, Moodle and Blackboard, or --pattern), and add "
        "the students to the gradebook. Every file is accounted for: placed, "
        "unchanged, or not placed with the reason.",
    )
    p.add_argument("source", type=Path, help="folder or .zip of submissions")
    p.add_argument("--assignment", "-a", required=True, help="assignment id or prefix")
    p.add_argument(
        "--pattern",
        type=_regex,
        metavar="REGEX",
        help="take the student id from each file's path (inside the folder or zip) "
        "with this regular expression, which must match the whole path and have a "
        "group (?P<student>...), e.g. '(?P<student>[a-z]+)-ex05\\.ipynb'",
    )
    p.add_argument(
        "--ids",
        choices=("lms", "names"),
        default="lms",
        help="student ids of LMS downloads: the LMS's id (lms, the default: Canvas "
        "user id, the roster's student for Moodle, Blackboard username) or the "
        "name-based ids of earlier versions (names: smithdave, dave_smith), for a "
        "class already graded with them",
    )
    p.add_argument(
        "--max-file-size",
        type=_memory,
        metavar="SIZE",
        help="largest notebook placed, e.g. 20M (default: nbgrader's "
        "CourseDirectory.max_file_size, 100 MB); a larger file is not extracted",
    )


def _add_roster(sub, quiet_opts, course_opts) -> None:
    """The ``course roster`` command."""
    p = sub.add_parser(
        "roster",
        parents=[course_opts, quiet_opts],
        help="add or update the students from the LMS's export",
        description="Read a Canvas gradebook export, a Moodle grade export, a "
        "Moodle grading worksheet (with --assignment) or a plain "
        "id,first_name,last_name,email[,lms_user_id] file, and add or update the "
        "gradebook's students with their names, emails and LMS ids (the ids "
        "course collect gives LMS downloads). Rows that cannot be read are listed "
        "with the reason.",
    )
    p.add_argument("file", type=Path, help="the CSV file the LMS exported")
    p.add_argument(
        "--assignment",
        "-a",
        help="the assignment of a Moodle grading worksheet (its participant ids "
        "belong to that assignment)",
    )


def _add_autograde(sub, quiet_opts, course_opts) -> None:
    """The ``course autograde`` command."""
    p = sub.add_parser(
        "autograde",
        parents=[course_opts, quiet_opts],
        help="grade every submission in parallel (nbgrader autograde)",
        description="Autograde every submission with nbgrader in parallel workers, "
        "each submission's kernel under a wall-time and memory limit. A submission "
        "that cannot be graded (invalid notebook, dead kernel, time-out) is recorded "
        "with 0 points and the reason; the run always goes on. Submissions unchanged "
        "since the last run are skipped unless --force.",
    )
    p.add_argument("assignment", help="assignment id or prefix")
    p.add_argument(
        "--jobs",
        "-j",
        type=_positive_int,
        default=os.cpu_count() or 1,
        help="parallel workers (default: number of CPUs; not used with --cluster)",
    )
    p.add_argument(
        "--cluster",
        metavar="ADDRESS",
        default=None,
        help="grade on the Dask cluster whose scheduler is at ADDRESS (e.g. "
        "tcp://10.0.0.5:8786), one task per submission, instead of in --jobs local "
        "workers; see the instructor guide, 'Grading on a cluster'",
    )
    p.add_argument(
        "--timeout",
        type=_positive_float,
        default=None,
        metavar="S",
        help="wall-time limit per submission in seconds (default: the per-cell "
        "limit times the released notebooks' code cells, plus 60 s)",
    )
    p.add_argument(
        "--cell-timeout",
        type=_positive_int,
        default=None,
        metavar="S",
        help="seconds each cell may run (default: nbgrader_config.py)",
    )
    p.add_argument(
        "--memory",
        type=_memory,
        default=4 << 30,
        metavar="SIZE",
        help="memory (address space) limit per kernel, e.g. 4G (default)",
    )
    p.add_argument(
        "--student",
        action="append",
        metavar="ID",
        help="grade only this student (repeatable)",
    )
    p.add_argument(
        "--force", action="store_true", help="regrade submissions already graded"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--max-processes",
        type=_positive_int,
        default=64,
        metavar="N",
        help="processes and threads per sandboxed kernel (default: 64)",
    )
    p.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="grade without the sandbox (student code then runs with your "
        "permissions: it can read the solutions and change the gradebook)",
    )


def _add_feedback(sub, quiet_opts, course_opts) -> None:
    """The ``course feedback`` command."""
    p = sub.add_parser(
        "feedback",
        parents=[course_opts, quiet_opts],
        help="write feedback HTML for every submission (nbgrader generate_feedback), "
        "and the zips that return it through Canvas and Moodle",
        description="Write nbgrader's feedback page for every graded submission "
        "and a page with the reason for each one that could not be graded; then, for "
        "the students whose notebook course collect took from a Canvas or Moodle "
        "download, reports/lms/ASSIGNMENT/canvas.zip (for Canvas's Re-Upload "
        "Submissions) and moodle.zip (for Moodle's Upload multiple feedback files "
        "in a zip).",
    )
    p.add_argument("assignment", help="assignment id or prefix")


def _add_report(sub, quiet_opts, course_opts) -> None:
    """The ``course report`` command."""
    p = sub.add_parser(
        "report",
        parents=[course_opts],
        help="grades CSV, pass rate per test, score histogram, ungradable submissions, "
        "what the class got wrong (the known mistakes per function, mistakes.csv); "
        "'all': every student across every assignment, and Canvas and Moodle import "
        "files",
    )
    p.add_argument(
        "assignment",
        help="assignment id or prefix, or 'all' (reports/all/: grades.csv, canvas.csv, "
        "moodle.csv)",
    )
    p.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="output folder (default: reports/<assignment>/, or reports/all/)",
    )


def _add_similarity(sub, course_opts) -> None:
    """The ``course similarity`` command."""
    p = sub.add_parser(
        "similarity",
        parents=[course_opts],
        help="compare every student's answers with every other's, the public "
        "solution and the bug zoo: pairs far above the class, side by side "
        "(evidence to look at, never a grade)",
        description="For each graded function: normalise every answer (the "
        "release's code, comments, layout and names removed, independent "
        "statements in one order), fingerprint it by winnowing (copydetect) and "
        "compare all pairs; write reports/<assignment>/similarity/ (index.html, "
        "pairs.csv, a side-by-side page per flagged pair). Changes no grade.",
    )
    p.add_argument("assignment", help="assignment id or prefix")
    p.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="output folder (default: reports/<assignment>/similarity/)",
    )


def _non_negative(text: str) -> float:
    """A number of days or hours for ``course extend``: finite, not negative."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0 or value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(
            f"must be a positive number, got {text} (to take an extension "
            "back: --clear)"
        )
    return value


def _add_extend(sub, course_opts) -> None:
    """The ``course extend`` command."""
    p = sub.add_parser(
        "extend",
        parents=[course_opts],
        help="give a student more time on an assignment (nbgrader's extension), or "
        "list the extensions (--list ASSIGNMENT)",
        description="Record an extension in the gradebook "
        "(SubmittedAssignment.extension): the student's due date becomes the "
        "assignment's due date plus the extension, and nbgrader's late penalty "
        "counts from there. A new extension replaces the old one (they do not add "
        "up). A graded submission's late penalty is computed again at once; course "
        "autograde also regrades it. Dates are UTC unless they name a zone, as "
        "nbgrader reads due dates.",
    )
    p.add_argument("student", nargs="?", help="student id")
    p.add_argument("assignment", nargs="?", help="assignment id or prefix")
    p.add_argument(
        "--days", type=_non_negative, metavar="N", help="days after the due date"
    )
    p.add_argument(
        "--hours",
        type=_non_negative,
        metavar="N",
        help="hours after the due date (added to --days)",
    )
    p.add_argument(
        "--until",
        metavar="DATE",
        help="the student's own due date, e.g. '2026-11-22 12:00:00 UTC'",
    )
    p.add_argument(
        "--clear", action="store_true", help="take the student's extension back"
    )
    p.add_argument(
        "--list",
        metavar="ASSIGNMENT",
        dest="list_assignment",
        help="list the extensions of ASSIGNMENT (due dates, submission times, "
        "penalties)",
    )


def _add_publish(sub) -> None:
    """The ``course publish`` command."""
    p = sub.add_parser(
        "publish",
        help="write the student-facing tree of a class: the class edition of the book "
        "(no solution listings), the release and chapter notebooks, the student "
        "wheel and a Binder environment",
    )
    p.add_argument(
        "out",
        type=Path,
        metavar="OUT",
        help="a new or empty folder (gets docs/, the book GitHub Pages serves, "
        "notebooks/, book/notebooks/, dist/, binder/)",
    )
    p.add_argument(
        "--root",
        type=Path,
        metavar="DIR",
        help="course folder (default: the nearest folder with _config.yml "
        "and notebooks/ at or above the working directory)",
    )


def _add_term(sub, course_opts) -> None:
    """The ``course term`` command."""
    sub.add_parser(
        "term",
        parents=[course_opts],
        help="show this term's exercise variants and hidden-case seed "
        "(c.CourseTerm in nbgrader_config.py) and every variant an exercise "
        "declares; an unknown exercise or variant is an error",
    )


def _add_doctor(sub) -> None:
    """The ``course doctor`` command."""
    sub.add_parser(
        "doctor",
        help="check that this machine can grade: Linux, bubblewrap, unprivileged "
        "user namespaces (and Ubuntu's AppArmor restriction), a working test "
        "sandbox, the grading packages; one line per check, with its fix "
        "(exit 1 when grading cannot run)",
    )


def _add_lab(sub) -> None:
    """The ``course lab`` command."""
    p = sub.add_parser(
        "lab",
        help="run the length-extrapolation lab (course_lib.experiments)",
        add_help=False,
    )
    p.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        help="arguments passed on to the lab (try: course lab --help)",
    )


def _course(args):
    from .grading.course import default_course

    course = default_course(args.root, args.db)
    course.check_gradebook_url()  # a bad --db is one line, before anything runs
    return course


def _cmd_check(args) -> int:
    from .grading.check import check_notebook, format_report
    from .grading.kernels.start import KernelLimits

    if args.hint:  # checks._core.HINTS_VARIABLE; the kernel inherits the environment
        os.environ["COURSE_HINTS"] = "1"
    report = check_notebook(
        args.notebook,
        cell_timeout=args.timeout,
        limits=KernelLimits(memory=args.memory, wall_seconds=None),
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(format_report(report))
    return 0 if report.ok else 1


def _cmd_release(args) -> int:
    from .grading.release import release

    results = release(_course(args), args.assignment)
    if args.quiet:
        print(f"released {len(results)} assignment(s)")
        return 0
    for r in results:
        term = "" if r.variant == "default" else f", variant {r.variant!r}"
        term += "" if r.seed is None else f", hidden cases of seed {r.seed}"
        print(
            f"released {r.assignment} ({r.points:g} points{term}): "
            f"{', '.join(r.notebooks)}"
        )
    return 0


def _cmd_roster(args) -> int:
    from .grading.roster import format_roster_report, load_roster

    rep = load_roster(_course(args), args.file, assignment=args.assignment)
    print(format_roster_report(rep, args.file))
    return 0


def _cmd_collect(args) -> int:
    from .grading.collect import collect

    rep = collect(
        _course(args),
        args.source,
        args.assignment,
        pattern=args.pattern,
        ids=args.ids,
        max_file_size=args.max_file_size,
    )
    print(
        f"{rep.assignment}: {len(rep.placed)} placed, {len(rep.unchanged)} unchanged, "
        f"{len(rep.not_placed)} not placed"
    )
    if not args.quiet:
        for student, source, dest in rep.placed:
            print(f"  {student:<16} {source} -> {dest}")
        for student, source in rep.unchanged:
            print(f"  {student:<16} {source} (unchanged)")
    if rep.not_placed:
        print("Not placed:")
        for name, reason in rep.not_placed:
            print(f"  {name}: {reason}")
    return 0


def _cmd_autograde(args) -> int:
    from .grading.autograde import (
        AutogradeOptions,
        autograde,
        limits_text,
        summary_lines,
    )
    from .grading.kernels.guard import sweep_leftovers
    from .grading.kernels.sandbox import grading_launcher
    from .grading.kernels.start import KernelContext, KernelLimits

    course = _course(args)
    # a wrong or unreleased assignment is said before the sandbox is built
    with course.gradebook(create=False, assignment=args.assignment) as gb:
        args.assignment = course.resolve_released(gb, args.assignment)
    limits = KernelLimits(memory=args.memory, wall_seconds=args.timeout or 600.0)
    removed = sweep_leftovers()
    if removed:
        print(
            f"course autograde: removed {removed} temporary folder(s) left by "
            "grading runs whose process is gone",
            file=sys.stderr,
        )
    if args.cluster and not args.unsafe_no_sandbox:
        from .grading.kernels.sandbox import SandboxLauncher, SandboxSettings

        # each worker checks and builds its own sandbox (course_lib.grading.cluster)
        launcher = SandboxLauncher(SandboxSettings(max_processes=args.max_processes))
        warning = None
    else:
        launcher, warning = grading_launcher(
            course, unsafe=args.unsafe_no_sandbox, max_processes=args.max_processes
        )
    if warning:
        print(f"course autograde: warning: {warning}", file=sys.stderr)
    options = AutogradeOptions(
        jobs=args.jobs,
        limits=limits,
        launcher=launcher,
        cell_timeout=args.cell_timeout,
        force=args.force,
        students=args.student,
        progress=_progress_wanted(args),
        cluster=args.cluster,
        wall_from_cells=args.timeout is None,
    )
    summary = autograde(course, args.assignment, options)
    lines = summary_lines(summary, limits_text(summary.limits))
    if args.quiet:  # the totals, and the submissions that could not be graded
        lines = lines[:1] + [
            f"  ungradable: {o.student}: {o.reason}"
            for o in summary.outcomes
            if o.status == "ungradable"
        ]
    print("\n".join(lines))
    if not args.quiet:
        print(f"kernels: {launcher.describe(KernelContext(limits=summary.limits))}")
    return 0


def _cmd_feedback(args) -> int:
    from .grading.feedback import feedback
    from .grading.lms_return import format_lms_archives, lms_archives

    course = _course(args)
    res = feedback(course, args.assignment)
    print(
        f"{res.assignment}: feedback for {len(res.graded)} graded and "
        f"{len(res.ungradable)} ungradable submissions"
    )
    if not args.quiet:
        for path in res.graded + res.ungradable:
            print(f"  {path}")
    archives = lms_archives(course, res.assignment)
    lines = format_lms_archives(archives, course.root)
    if args.quiet and archives.not_included:  # the count, not the list
        lines = [line for line in lines if line.startswith(("wrote", "removed"))]
        left = len(archives.not_included)
        lines.append(
            f"{left} student{'s' * (left != 1)} not in an LMS archive (without "
            "--quiet: who and why)"
        )
    if lines:
        print("\n".join(lines))
    return 0


def _cmd_report(args) -> int:
    if args.assignment == "all":
        from .grading.lms import format_term_report, term_report

        print(format_term_report(term_report(_course(args), args.out)))
        return 0
    from .grading.report import format_report, report

    print(format_report(report(_course(args), args.assignment, args.out)))
    return 0


def _cmd_similarity(args) -> int:
    from .grading.similarity import format_report, similarity

    print(format_report(similarity(_course(args), args.assignment, args.out)))
    return 0


def _cmd_extend(args) -> int:
    from .grading import late
    from .grading.errors import CourseError

    if args.list_assignment:
        if args.student or args.days or args.hours or args.until or args.clear:
            raise CourseError("--list ASSIGNMENT takes no student and no amount")
        print(
            late.format_extensions(
                *late.list_extensions(_course(args), args.list_assignment)
            )
        )
        return 0
    if not (args.student and args.assignment):
        raise CourseError(
            "give a student and an assignment (course extend alice ex05 --days 2), "
            "or --list ASSIGNMENT"
        )
    amounts = [args.days is not None or args.hours is not None, bool(args.until)]
    if sum(amounts) + args.clear != 1:
        raise CourseError(
            "give how long: --days N and/or --hours N, or --until DATE, or --clear"
        )
    if not args.clear and not args.until and not (args.days or args.hours):
        raise CourseError("an extension of 0 is none: to take one back, --clear")
    result = late.grant_extension(
        _course(args),
        args.student,
        args.assignment,
        days=args.days,
        hours=args.hours,
        until=args.until,
    )
    print(late.format_grant(result))
    return 0


def _cmd_publish(args) -> int:
    from .grading.editions.publish import publish

    result = publish(
        args.out, root=args.root, log=lambda line: print(line, file=sys.stderr)
    )
    files = sorted(p for p in result.out.rglob("*") if p.is_file())
    print(f"published {len(files)} files to {result.out}:")
    pages = sum(1 for p in files if p.suffix == ".html" and result.html in p.parents)
    releases = sum(1 for p in result.notebooks if p.suffix == ".ipynb")
    where = f", served at {result.book_url}" if result.book_url else ""
    print(f"  docs/       class edition of the book ({pages} pages{where})")
    chapters = len(list((result.out / "book" / "notebooks").glob("*.ipynb")))
    print(f"  notebooks/  {releases} release notebooks")
    print(f"  book/notebooks/  {chapters} chapter notebooks (no solution dropdowns)")
    print(f"  dist/       {result.wheel.name}")
    print("  binder/     Binder environment (CPU torch, then the wheel of dist/)")
    return 0


def _cmd_term(args) -> int:
    from .grading.course import default_course
    from .grading.editions.term import describe, read_term

    print("\n".join(describe(read_term(default_course(args.root, args.db)))))
    return 0


def _cmd_doctor(args) -> int:
    from .grading.kernels.doctor import diagnose, format_report, gather, ready

    checks = diagnose(gather())
    print(format_report(checks))
    return 0 if ready(checks) else 1


def _cmd_lab(args) -> int:
    try:
        module = importlib.import_module("course_lib.experiments.__main__")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("course_lib.experiments"):
            print(
                "course lab: the lab (course_lib.experiments) is not installed",
                file=sys.stderr,
            )
            return 2
        raise
    if "--lm" in args.args:  # the language-model experiment (experiments.lm)
        from course_lib.experiments.lm import lm_main

        return int(lm_main([a for a in args.args if a not in ("--quiet", "-q")]) or 0)
    entry = getattr(module, "main", None)
    if entry is None:
        print("course lab: course_lib.experiments has no main()", file=sys.stderr)
        return 2
    lab_args = [a for a in args.args if a not in ("--quiet", "-q")]
    quiet = len(lab_args) < len(args.args)
    # the lab's bar only for a person watching (see _progress_wanted)
    if (quiet or not sys.stderr.isatty()) and "--no-progress" not in lab_args:
        lab_args.append("--no-progress")
    import inspect

    if inspect.signature(entry).parameters:
        code = entry(lab_args)
    else:
        saved, sys.argv = sys.argv, ["course lab", *lab_args]
        try:
            code = entry()
        finally:
            sys.argv = saved
    return int(code or 0)


_COMMANDS = {
    "check": _cmd_check,
    "release": _cmd_release,
    "roster": _cmd_roster,
    "collect": _cmd_collect,
    "extend": _cmd_extend,
    "autograde": _cmd_autograde,
    "feedback": _cmd_feedback,
    "report": _cmd_report,
    "similarity": _cmd_similarity,
    "lab": _cmd_lab,
    "publish": _cmd_publish,
    "term": _cmd_term,
    "doctor": _cmd_doctor,
}


def main(argv: list[str] | None = None) -> int:
    """Run ``course``; returns the exit status (0: success, 1: a check failed,
    2: an error the message explains)."""
    from .grading.errors import CourseError

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["lab"]:  # everything after `lab` belongs to the lab's own parser
        return _cmd_lab(argparse.Namespace(args=argv[1:]))
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except CourseError as exc:
        print(f"course {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        # The student edition ships `course check` only; a core install lacks
        # nbgrader. Either way the instructor's tool is not installed here.
        if not (exc.name or "").startswith(("course_lib.grading.", "nbgrader")):
            raise
        print(
            f"course {args.command}: error: this command is part of the "
            "instructor's tool, which is not installed here (the student edition "
            "of course_lib has `course check` only; instructors install "
            "course_lib[grading])",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"course {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `course collect ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
