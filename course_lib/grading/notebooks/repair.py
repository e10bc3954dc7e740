"""Repair the accidents students make to a notebook before it is graded.

Students copy and paste cells in JupyterLab, delete a cell's metadata, drag a test
cell above its answer, save with another Jupyter version or hand in a notebook full
of outputs. nbgrader stops on several of these (a grade id seen twice, a grade id it
does not know, a missing test cell whose neighbour lost its metadata) and the
submission would score zero. :func:`repair_notebook` turns such a notebook into the
one the student meant, judged against what the course knows about the assignment's
cells (a :class:`Reference`, built from the released notebook and the gradebook),
and says in plain words what it changed:

* the file is read whatever nbformat 4 minor version (4.0 to 4.5) saved it, given
  the cell ids format 4.5 requires, and outputs are cleared (grading runs every
  cell afresh);
* a cell that carries grading metadata with a grade id the assignment does not have
  becomes an ordinary cell: it still runs, and earns nothing;
* of a cell pasted twice (the same grade id), one copy is graded: for a test or
  other locked cell a copy whose text is the released one (the other identical copies
  are removed, edited copies run as ordinary cells); for an answer cell the copy the
  student wrote in (the others stay in place as ordinary code, so the notebook runs
  as the student ran it);
* a cell that lost its metadata gets it back: a test cell by its released text, an
  answer cell by the function it defines between its neighbours; a test cell that is
  gone altogether is put back from the release;
* cells of the assignment that stand out of the released order (a test cell dragged
  above its answer) are moved back, the student's own cells staying where they were.

What cannot be repaired (a file that is not a notebook, a damaged cell) raises
:class:`Ungradable` with a reason that names the problem and the fix.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "KnownCell",
    "Note",
    "NOTES_CELL_ID",
    "Reference",
    "RepairResult",
    "Ungradable",
    "notes_cell",
    "notes_from_notebook",
    "read_notebook",
    "repair_file",
    "repair_notebook",
]

NOTES_CELL_ID = "course-repair-notes"
_NOTES_KEY = "course_repairs"  # the notes cell's metadata: the repairs as a list
_NOTES_TITLE = "**Repairs made before grading.**"
_ID_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_FLAGS = ("grade", "solution", "locked", "task")


class Ungradable(Exception):
    """The notebook cannot be graded; the message says why and what to do, in plain
    words."""


@dataclass(frozen=True)
class Note:
    """One repair: ``text`` says what grading did, ``advice`` what the student can do
    so that it is not needed. ``routine`` repairs (outputs cleared, a newer format)
    are normal and are left out of the instructor's table."""

    text: str
    advice: str = ""
    routine: bool = False

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class KnownCell:
    """A cell of the assignment: its grade id, kind, points, the text it has in the
    release (``source``; ``None`` when unknown) and the text grading restores for a
    locked cell (``graded_source``, from the gradebook; it holds the hidden tests)."""

    grade_id: str
    cell_type: str
    grade: bool = False
    solution: bool = False
    locked: bool = False
    task: bool = False
    points: float | None = None
    source: str | None = None
    graded_source: str | None = None
    checksum: str | None = None
    released_metadata: str | None = None  # the release's nbgrader metadata (JSON)

    @classmethod
    def from_cell(cls, cell: dict, meta: dict, **known: Any) -> KnownCell:
        """The assignment cell that a notebook cell with nbgrader metadata ``meta``
        is (``known``: what else is known of it, such as its released text)."""
        return cls(
            grade_id=meta["grade_id"],
            cell_type=cell.get("cell_type", "code"),
            grade=bool(meta.get("grade")),
            solution=bool(meta.get("solution")),
            locked=bool(meta.get("locked")),
            task=bool(meta.get("task")),
            points=meta.get("points"),
            checksum=meta.get("checksum"),
            **known,
        )

    @property
    def kind(self) -> str:
        if self.solution and self.grade:
            return "answer cell (graded by hand)"
        if self.solution:
            return "answer cell"
        if self.grade:
            return "test cell"
        if self.task:
            return "task cell"
        return "locked cell"

    def metadata(self) -> dict[str, Any]:
        """The cell's nbgrader metadata as the release has it."""
        if self.released_metadata is not None:
            return json.loads(self.released_metadata)
        meta: dict[str, Any] = {
            "cell_type": self.cell_type,
            "grade": self.grade,
            "grade_id": self.grade_id,
            "locked": self.locked,
            "schema_version": 3,
            "solution": self.solution,
            "task": self.task,
        }
        if self.grade or self.task:
            meta["points"] = self.points if self.points is not None else 0
        if self.checksum:
            meta["checksum"] = self.checksum
        return meta

    def matches_release(self, source: str) -> bool:
        """Whether ``source`` is this cell's released (or graded) text."""
        texts = {s.strip() for s in (self.source, self.graded_source) if s is not None}
        return source.strip() in texts


@dataclass(frozen=True)
class Reference:
    """What the course knows about one notebook of an assignment: its cells with
    nbgrader metadata, in released order, and the texts of its ordinary cells (task
    text, imports), which are never taken for a student's answer."""

    notebook: str
    cells: tuple[KnownCell, ...]
    plain_sources: frozenset[str] = frozenset()
    ordered: bool = True  # False: the order is a guess; cells are never moved

    def __post_init__(self) -> None:
        ids = [c.grade_id for c in self.cells]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{self.notebook}: duplicate grade ids in the reference")

    @property
    def by_id(self) -> dict[str, KnownCell]:
        return {c.grade_id: c for c in self.cells}

    def rank(self, grade_id: str) -> int:
        return [c.grade_id for c in self.cells].index(grade_id)

    @classmethod
    def from_notebook(cls, nb, name: str | None = None) -> Reference:
        """The reference of a released (or source) notebook: a path or a node."""
        if not hasattr(nb, "cells"):
            import nbformat

            path = Path(nb)
            name = name or path.stem
            nb = nbformat.read(str(path), as_version=4)
        cells, plain = [], set()
        for cell in nb.cells:
            meta = _nbgrader_meta(cell)
            gid = meta.get("grade_id") if meta else None
            if not gid or not any(meta.get(k) for k in _FLAGS):
                plain.add(_source(cell).strip())
                continue
            cells.append(
                KnownCell.from_cell(
                    cell,
                    meta,
                    source=_source(cell),
                    released_metadata=json.dumps(meta, sort_keys=True),
                )
            )
        plain.discard("")
        return cls(name or "notebook", tuple(cells), frozenset(plain))

    @classmethod
    def from_gradebook(
        cls, gb, assignment: str, notebook: str, release=None
    ) -> Reference:
        """The reference of ``notebook`` of ``assignment`` in an nbgrader gradebook;
        ``release`` (a path or notebook node: the released notebook, else the source
        notebook) gives the order and the released texts. The gradebook decides
        which cells exist."""
        nb = gb.find_notebook(notebook, assignment)
        grades = {c.name: c for c in nb.grade_cells}
        solutions = {c.name for c in nb.solution_cells}
        tasks = {c.name: c for c in nb.task_cells}
        stored = {c.name: c for c in nb.source_cells}
        base = (
            cls.from_notebook(release, notebook)
            if release is not None
            else cls(notebook, ())
        )
        released = base.by_id
        order = [c.grade_id for c in base.cells if c.grade_id in stored]
        order += sorted(set(stored) - set(order))
        cells = []
        for gid in order:
            src = stored[gid]
            rel = released.get(gid)
            graded = grades.get(gid) or tasks.get(gid)
            cells.append(
                KnownCell(
                    grade_id=gid,
                    cell_type=src.cell_type,
                    grade=gid in grades,
                    solution=gid in solutions,
                    locked=bool(src.locked),
                    task=gid in tasks,
                    points=None if graded is None else float(graded.max_score),
                    source=rel.source if rel is not None else None,
                    graded_source=src.source,
                    checksum=src.checksum,
                    released_metadata=None if rel is None else rel.released_metadata,
                )
            )
        ordered = release is not None and len(base.cells) > 0
        return cls(notebook, tuple(cells), base.plain_sources, ordered)

    @classmethod
    def from_own_metadata(cls, nb, name: str = "notebook") -> Reference:
        """A reference read from a submitted notebook's own metadata, for when the
        release is not at hand (``course check`` on a student's machine): every grade
        id it carries, in order of first appearance, answers before the tests of the
        same exercise (``<name>__answer`` before ``<name>__public``/``__hidden``).
        A locked cell's released text is known from its checksum only."""
        first: dict[str, KnownCell] = {}
        for cell in nb.get("cells", []):
            if not isinstance(cell, dict):
                continue
            meta = _nbgrader_meta(cell)
            gid = meta.get("grade_id") if meta else None
            if not gid or gid in first or not any(meta.get(k) for k in _FLAGS):
                continue
            first[gid] = KnownCell.from_cell(cell, meta)
        suffix = {"answer": 0, "public": 1, "hidden": 2}
        exercises: list[str] = []
        for gid in first:
            stem = gid.rsplit("__", 1)[0]
            if stem not in exercises:
                exercises.append(stem)

        def key(gid: str) -> tuple[int, int, int]:
            stem, _, tail = gid.rpartition("__")
            stem = stem if tail in suffix else gid
            return (exercises.index(stem), suffix.get(tail, 3), list(first).index(gid))

        cells = tuple(first[g] for g in sorted(first, key=key))
        return cls(name, cells, frozenset(), ordered=True)


@dataclass
class RepairResult:
    """The repaired notebook and what was done to it."""

    notebook: Any
    notes: list[Note] = field(default_factory=list)
    # for each cell of the repaired notebook, its 1-based position in the submitted
    # one (None: put back by the repair)
    origins: list[int | None] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.notes)

    def texts(self, *, routine: bool = True) -> list[str]:
        return [n.text for n in self.notes if routine or not n.routine]


# --------------------------------------------------------------------------------
# reading


def _nbgrader_meta(cell) -> dict[str, Any]:
    meta = cell.get("metadata")
    if not isinstance(meta, dict):
        return {}
    nbg = meta.get("nbgrader")
    return nbg if isinstance(nbg, dict) else {}


def _source(cell) -> str:
    src = cell.get("source", "")
    if isinstance(src, list):
        return "".join(str(s) for s in src)
    return str(src)


def read_notebook(data: bytes | str | Path, name: str = "the file"):
    """Parse a submitted notebook (bytes, text or a path) into an nbformat 4 node
    with its cells checked; :class:`Ungradable` says in plain words what is wrong.
    Returns ``(notebook, notes)``: the notes say what was upgraded."""
    import nbformat

    if isinstance(data, Path):
        name = data.name if name == "the file" else name
    raw = _notebook_json(_notebook_text(data, name), name)
    notes: list[Note] = []
    raw, minor = _as_format_4(raw, name, notes)
    for index, cell in enumerate(raw["cells"]):
        _check_cell(cell, f"cell {index + 1}", name)
    if isinstance(minor, int) and minor < 5:
        notes.append(
            Note(
                f"the notebook was saved in format 4.{minor} by another Jupyter "
                "version; it was upgraded to 4.5",
                routine=True,
            )
        )
    raw["nbformat_minor"] = 5
    if not isinstance(raw.get("metadata"), dict):
        raw["metadata"] = {}
    nb = nbformat.from_dict(raw)
    return nb, notes


def _notebook_text(data: bytes | str | Path, name: str) -> str:
    """The submission as text: read, decoded from UTF-8, not empty."""
    if isinstance(data, Path):
        try:
            data = data.read_bytes()
        except OSError as exc:
            raise Ungradable(f"{name} cannot be read ({exc.strerror})") from None
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise Ungradable(
                f"{name} is not a notebook: it is not text in UTF-8 (byte "
                f"{exc.start + 1} cannot be read); submit the .ipynb file that "
                "JupyterLab saves"
            ) from None
    else:
        text = data
    if not text.strip():
        raise Ungradable(
            f"{name} is empty; submit the .ipynb file that JupyterLab saves"
        )
    return text


def _notebook_json(text: str, name: str) -> dict:
    """The submission's JSON, which must look like a notebook (a list of cells)."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Ungradable(
            f"{name} is not a valid notebook (invalid JSON at line {exc.lineno}, "
            f"column {exc.colno}: {exc.msg.lower()}); the file was cut off or edited "
            "outside Jupyter: open it in JupyterLab, save it and submit it again"
        ) from None
    if (
        not isinstance(raw, dict)
        or not isinstance(raw.get("cells", []), list)
        or ("cells" not in raw and "worksheets" not in raw)
    ):
        raise Ungradable(
            f"{name} is JSON but not a notebook (it has no list of cells); submit the "
            ".ipynb file of the exercise"
        )
    return raw


def _as_format_4(raw: dict, name: str, notes: list[Note]) -> tuple[dict, object]:
    """``raw`` in notebook format 4 (a format 3 notebook converted, noted) and the
    minor version it was saved in."""
    import nbformat

    major = raw.get("nbformat")
    minor = raw.get("nbformat_minor", 0)
    if not isinstance(major, int) or major < 3 or major > 4:
        raise Ungradable(
            f"{name} says it is in notebook format {major!r}, which grading cannot "
            "read (it reads formats 3 and 4); open it in JupyterLab, save it and "
            "submit it again"
        )
    if major == 4:
        return raw, minor
    try:
        nb = nbformat.reads(json.dumps(raw), as_version=4)
    except Exception as exc:  # noqa: BLE001 - any failure of the conversion
        raise Ungradable(
            f"{name} is in the old notebook format 3 and could not be converted "
            f"({_plain(exc)}); open it in JupyterLab, save it and submit it again"
        ) from None
    notes.append(
        Note(
            "the notebook was saved in the old format 3; it was converted to 4.5",
            routine=True,
        )
    )
    return json.loads(nbformat.writes(nb)), 5


def _check_cell(cell, where: str, name: str) -> None:
    """A cell must be a mapping with a known type and text for a source."""
    if not isinstance(cell, dict):
        raise Ungradable(
            f"{where} of {name} is damaged (it is not a cell); open the notebook "
            "in JupyterLab, delete that cell and submit it again"
        )
    kind = cell.get("cell_type")
    if kind not in ("code", "markdown", "raw"):
        raise Ungradable(
            f"{where} of {name} is damaged (its cell type is {kind!r}); open the "
            "notebook in JupyterLab, delete or retype that cell and submit it again"
        )
    src = cell.get("source", "")
    if not isinstance(src, str) and not (
        isinstance(src, list) and all(isinstance(s, str) for s in src)
    ):
        raise Ungradable(
            f"{where} of {name} is damaged (its text is not text); open the "
            "notebook in JupyterLab, delete that cell and submit it again"
        )


def _plain(exc: BaseException) -> str:
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
    return first[:200] or "no details"


# --------------------------------------------------------------------------------
# repairing


def _function_names(source: str) -> set[str]:
    """Names defined at top level by ``source`` (functions, classes, assignments)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        # a cell that does not parse: fall back on its `def name(` lines
        return set(re.findall(r"^def\s+([A-Za-z_]\w*)\s*\(", source, re.M))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def _clean_cell(cell) -> None:
    """A cell as nbformat 4.5 wants it: source as text, metadata a dict, code cells
    with empty outputs."""
    cell["source"] = _source(cell)
    if not isinstance(cell.get("metadata"), dict):
        cell["metadata"] = {}
    if cell["cell_type"] == "code":
        cell["outputs"] = []
        cell["execution_count"] = None
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)


def _strip(cell) -> None:
    """Make ``cell`` an ordinary cell (no nbgrader metadata, editable)."""
    meta = cell.get("metadata", {})
    meta.pop("nbgrader", None)
    meta.pop("editable", None)
    meta.pop("deletable", None)


def _weighted_lis(ranks: list[int], weights: list[int]) -> set[int]:
    """Positions of a heaviest strictly increasing subsequence of ``ranks``."""
    n = len(ranks)
    best = list(weights)
    prev = [-1] * n
    for i in range(n):
        for j in range(i):
            if ranks[j] < ranks[i] and best[j] + weights[i] > best[i]:
                best[i], prev[i] = best[j] + weights[i], j
    if not n:
        return set()
    # ties: prefer the subsequence ending last (keeps earlier cells in place)
    end = max(range(n), key=lambda i: (best[i], -i))
    keep = set()
    while end != -1:
        keep.add(end)
        end = prev[end]
    return keep


@dataclass
class _Cell:
    node: Any
    origin: int | None  # 1-based position in the submitted notebook; None: inserted
    gid: str | None = None  # grade id of the assignment cell it is, if any

    @property
    def where(self) -> str:
        return f"cell {self.origin}" if self.origin is not None else "a new cell"


def repair_notebook(nb, reference: Reference) -> RepairResult:
    """Repair the accidents in ``nb`` (an nbformat 4 node; changed in place and
    returned) against ``reference``; see the module docstring."""
    notes: list[Note] = []
    cells = [_Cell(c, i + 1) for i, c in enumerate(nb.cells)]
    _clear_outputs(cells, notes)
    stripped = _claim_metadata(cells, reference, notes)
    cells = _drop_duplicates(cells, reference, stripped, notes)
    if reference.ordered:  # the assignment's cells in released order
        cells = _reorder(cells, reference, notes)
    # cells that lost their metadata, or are gone
    cells = _restore_missing(cells, reference, stripped, notes)
    for c in cells:
        if c.gid:
            _as_released(c, reference.by_id[c.gid], notes)
    nb.cells = [c.node for c in cells]
    _fix_ids(nb, notes)
    nb.nbformat, nb.nbformat_minor = 4, 5
    return RepairResult(nb, notes, [c.origin for c in cells])


def _clear_outputs(cells: list[_Cell], notes: list[Note]) -> None:
    """Outputs go: grading runs every cell afresh."""
    with_outputs = sum(
        1 for c in cells if c.node.get("cell_type") == "code" and c.node.get("outputs")
    )
    for c in cells:
        _clean_cell(c.node)
    if with_outputs:
        notes.append(
            Note(
                f"cleared the outputs of {with_outputs} cell"
                f"{'s' * (with_outputs != 1)} (grading runs every cell afresh)",
                routine=True,
            )
        )


def _claim_metadata(
    cells: list[_Cell], reference: Reference, notes: list[Note]
) -> set[int]:
    """Each cell with grading metadata is the assignment's cell of that grade id
    (``gid`` set) or loses the metadata; the ids of the cells that lost flagged
    metadata (candidates for a cell whose own metadata is gone)."""
    known = reference.by_id
    stripped: set[int] = set()
    for c in cells:
        meta = _nbgrader_meta(c.node)
        if "nbgrader" in c.node["metadata"] and not meta:
            _strip(c.node)  # metadata that is not even a mapping
            continue
        if not meta:
            continue
        gid = meta.get("grade_id")
        flagged = any(meta.get(k) for k in _FLAGS)
        if isinstance(gid, str) and gid in known:
            c.gid = gid
            continue
        _strip(c.node)
        if flagged:
            stripped.add(id(c))
            label = f"grade id `{gid}`" if gid else "no grade id"
            notes.append(
                Note(
                    f"{c.where} carries grading metadata ({label}) that this "
                    "assignment does not have: it runs as an ordinary cell and earns "
                    "no points",
                    advice=(
                        f"{c.where} carries grading metadata ({label}) that this "
                        "assignment does not have; copy its text into a new cell and "
                        "delete it"
                    ),
                )
            )
    return stripped


def _drop_duplicates(
    cells: list[_Cell], reference: Reference, stripped: set[int], notes: list[Note]
) -> list[_Cell]:
    """Of several copies of an assignment cell, one is the assignment's cell; a
    copy of a locked cell with the released text is dropped, any other copy runs
    as an ordinary cell."""
    known = reference.by_id
    groups: dict[str, list[_Cell]] = {}
    for c in cells:
        if c.gid:
            groups.setdefault(c.gid, []).append(c)
    dropped: set[int] = set()
    for gid, copies in groups.items():
        if len(copies) < 2:
            continue
        ref = known[gid]
        keep = _choose_copy(ref, copies, cells, reference)
        for c in copies:
            if c is keep:
                continue
            c.gid = None
            _strip(c.node)
            stripped.add(id(c))
            same = _is_released_text(ref, c.node)
            if ref.locked and same:
                dropped.add(id(c))
                notes.append(
                    Note(
                        f"{c.where} repeats the {ref.kind} `{gid}`; the copy was "
                        f"removed and {keep.where} graded",
                        advice=f"{c.where} repeats the {ref.kind} `{gid}`; delete the "
                        "copy",
                    )
                )
            elif ref.locked:
                notes.append(
                    Note(
                        f"{c.where} is an edited copy of the {ref.kind} `{gid}`: it "
                        f"runs as an ordinary cell and {keep.where} is graded",
                        advice=f"{c.where} is an edited copy of the {ref.kind} "
                        f"`{gid}`; delete the copy",
                    )
                )
            else:
                notes.append(
                    Note(
                        f"{c.where} is a second copy of the {ref.kind} `{gid}`: "
                        f"{keep.where} (the one you wrote in) is graded, {c.where} "
                        "runs as ordinary "
                        + ("code" if c.node["cell_type"] == "code" else "text"),
                        advice=f"{c.where} is a second copy of the {ref.kind} "
                        f"`{gid}`; keep your answer in {keep.where} and delete the "
                        "copy",
                    )
                )
    return [c for c in cells if id(c) not in dropped]


def _as_released(c: _Cell, ref: KnownCell, notes: list[Note]) -> None:
    """The assignment cell ``c`` with the release's metadata, cell type and (when
    locked) text, each change noted."""
    meta = ref.metadata()
    old = _nbgrader_meta(c.node)
    changed = any(bool(old.get(k)) != meta[k] for k in _FLAGS)
    if old and changed and c.origin is not None:
        notes.append(
            Note(
                f"the grading metadata of {c.where} (`{ref.grade_id}`) had been "
                f"changed; it is the {ref.kind} again",
                advice=f"the grading metadata of {c.where} (`{ref.grade_id}`) was "
                "changed; do not edit cell metadata",
            )
        )
    c.node["metadata"]["nbgrader"] = meta
    if ref.locked:
        c.node["metadata"]["editable"] = False
        c.node["metadata"]["deletable"] = False
        if ref.source is not None and _source(c.node).strip() != ref.source.strip():
            if c.origin is not None and not ref.matches_release(_source(c.node)):
                notes.append(
                    Note(
                        f"the {ref.kind} `{ref.grade_id}` ({c.where}) had been "
                        "edited; grading uses the released text",
                        advice=f"the {ref.kind} `{ref.grade_id}` ({c.where}) was "
                        "edited; grading uses the released text, so undo the edit",
                    )
                )
            c.node["source"] = ref.source
    if ref.cell_type != c.node["cell_type"]:
        notes.append(
            Note(
                f"{c.where} (`{ref.grade_id}`) had been turned into a "
                f"{c.node['cell_type']} cell; it is a {ref.cell_type} cell again",
                advice=f"{c.where} (`{ref.grade_id}`) must stay a "
                f"{ref.cell_type} cell",
            )
        )
        c.node["cell_type"] = ref.cell_type
        _clean_cell(c.node)
        if ref.cell_type != "code":
            c.node.pop("outputs", None)
            c.node.pop("execution_count", None)


def _is_released_text(ref: KnownCell, node) -> bool:
    if ref.source is not None or ref.graded_source is not None:
        return ref.matches_release(_source(node))
    if ref.checksum:
        return _checksum(node, ref) == ref.checksum
    return False


def _checksum(node, ref: KnownCell) -> str:
    """nbgrader's checksum of ``node`` as the cell ``ref`` (nbgrader.utils.
    compute_checksum, computed here so that no grading package is needed)."""
    import hashlib

    m = hashlib.md5()
    m.update(_source(node).encode("utf-8"))
    m.update(node["cell_type"].encode("utf-8"))
    m.update(str(ref.grade).encode())
    m.update(str(ref.solution).encode())
    m.update(str(ref.locked).encode())
    m.update(ref.grade_id.encode("utf-8"))
    if ref.grade:
        m.update(str(float(ref.points or 0)).encode())
    return m.hexdigest()


def _choose_copy(
    ref: KnownCell, copies: list[_Cell], cells: list[_Cell], reference: Reference
) -> _Cell:
    """The copy of a duplicated cell that is graded."""
    position = {id(c): i for i, c in enumerate(cells)}
    others = [c for c in cells if c.gid and c.gid != ref.grade_id and reference.ordered]
    rank = reference.rank(ref.grade_id) if reference.ordered else 0

    def in_place(c: _Cell) -> int:
        """How many other assignment cells stand on the released side of it."""
        here = position[id(c)]
        return sum(
            (reference.rank(o.gid) < rank) == (position[id(o)] < here) for o in others
        )

    if ref.locked or not ref.solution:
        same = [c for c in copies if _is_released_text(ref, c.node)] or copies
        return max(same, key=lambda c: (in_place(c), -position[id(c)]))
    # an answer: the copy the student wrote in; of several, the last one standing
    # before the exercise's tests (the one their own checks ran against)
    stub = ref.source.strip() if ref.source is not None else None
    written = [c for c in copies if stub is None or _source(c.node).strip() != stub]
    if not written:
        return copies[0]
    best = max(in_place(c) for c in written)
    return [c for c in written if in_place(c) == best][-1]


def _reorder(
    cells: list[_Cell], reference: Reference, notes: list[Note]
) -> list[_Cell]:
    known = reference.by_id
    present = [c for c in cells if c.gid]
    ranks = [reference.rank(c.gid) for c in present]
    # answers weigh more: a test cell is moved rather than the student's answer
    weights = [3 if known[c.gid].solution else 1 for c in present]
    keep = _weighted_lis(ranks, weights)
    moved = [c for i, c in enumerate(present) if i not in keep]
    if not moved:
        return cells
    out = [c for c in cells if not any(c is m for m in moved)]
    for c in sorted(moved, key=lambda m: reference.rank(m.gid)):
        at, _ = _insertion_point(out, reference, reference.rank(c.gid))
        out.insert(at, c)
        ref = known[c.gid]
        place = _place_words(out, at, reference)
        notes.append(
            Note(
                f"{c.where} (the {ref.kind} `{c.gid}`) stood out of the released "
                f"order; it was moved back {place}".rstrip(),
                advice=f"{c.where} (the {ref.kind} `{c.gid}`) is out of place; move "
                f"it back {place}".rstrip(),
            )
        )
    return out


def _place_words(cells: list[_Cell], at: int, reference: Reference) -> str:
    before = next((c.gid for c in reversed(cells[:at]) if c.gid), None)
    after = next((c.gid for c in cells[at + 1 :] if c.gid), None)
    if before:
        return f"below `{before}`"
    if after:
        return f"above `{after}`"
    return ""


def _insertion_point(
    cells: list[_Cell], reference: Reference, rank: int
) -> tuple[int, str | None]:
    """Where an assignment cell of released rank ``rank`` goes: at the end of the
    block (the cell and the student's cells after it) of the nearest assignment cell
    released before it; at the start of the nearest one released after it when there
    is none."""
    pred = None
    for i, c in enumerate(cells):
        if c.gid and reference.rank(c.gid) < rank:
            if pred is None or reference.rank(cells[pred].gid) < reference.rank(c.gid):
                pred = i
    if pred is not None:
        at = pred + 1
        while at < len(cells) and not cells[at].gid:
            at += 1
        return at, cells[pred].gid
    succ = next(
        (i for i, c in enumerate(cells) if c.gid and reference.rank(c.gid) > rank),
        len(cells),
    )
    return succ, None


def _region(cells: list[_Cell], reference: Reference, rank: int) -> range:
    """Positions between the assignment cells released just before and just after
    the cell of rank ``rank``."""
    lo, hi = -1, len(cells)
    for i, c in enumerate(cells):
        if not c.gid:
            continue
        r = reference.rank(c.gid)
        if r < rank:
            lo = max(lo, i)
        elif r > rank and i < hi:
            hi = i
    return range(lo + 1, hi) if lo < hi else range(0)


def _restore_missing(
    cells: list[_Cell], reference: Reference, stripped: set[int], notes: list[Note]
) -> list[_Cell]:
    """Each assignment cell not present: a cell that lost its metadata is adopted
    as it, else a graded, task or locked cell is put back from the release (where
    its text is known); each case noted."""
    present = {c.gid for c in cells if c.gid}
    for ref in reference.cells:
        if ref.grade_id in present:
            continue
        rank = reference.rank(ref.grade_id) if reference.ordered else len(cells)
        found = _adoptable(cells, reference, stripped, ref, rank)
        if found is not None:
            found.gid = ref.grade_id
            present.add(ref.grade_id)
            notes.append(
                Note(
                    f"{found.where} had lost its grading metadata; it is the "
                    f"{ref.kind} `{ref.grade_id}` again",
                    advice=f"{found.where} lost its grading metadata (the {ref.kind} "
                    f"`{ref.grade_id}`); fetch a fresh copy of the exercise and move "
                    "your work into it",
                )
            )
        elif _put_back(cells, reference, ref, rank, notes):
            present.add(ref.grade_id)
    return cells


def _adoptable(
    cells: list[_Cell], reference: Reference, stripped: set[int], ref, rank: int
) -> _Cell | None:
    """The cell without metadata, where the release has ``ref``, that is it."""
    region = _region(cells, reference, rank) if reference.ordered else range(len(cells))
    candidates = [
        i
        for i in region
        if not cells[i].gid
        and id(cells[i]) not in stripped
        and cells[i].node["cell_type"] == ref.cell_type
        and _source(cells[i].node).strip() not in reference.plain_sources
    ]
    return _adopt(ref, [cells[i] for i in candidates])


def _put_back(
    cells: list[_Cell], reference: Reference, ref, rank: int, notes: list[Note]
) -> bool:
    """Insert the missing ``ref`` from the release, where that makes sense and its
    text is known; whether it was put back (a note says what happened either way,
    but for an ordinary cell)."""
    import nbformat

    if not (ref.grade or ref.task) and ref.solution:
        notes.append(
            Note(
                f"the {ref.kind} `{ref.grade_id}` was not found (deleted, or its "
                "grading metadata was removed); the code of the notebook is "
                "graded as it stands",
                advice=f"the {ref.kind} `{ref.grade_id}` is missing; fetch a fresh "
                "copy of the exercise and move your work into it",
            )
        )
        return False
    if not (ref.grade or ref.task or ref.locked):
        return False
    if ref.source is None and ref.graded_source is None:
        notes.append(
            Note(
                f"the {ref.kind} `{ref.grade_id}` is missing",
                advice=f"the {ref.kind} `{ref.grade_id}` is missing; fetch a "
                "fresh copy of the exercise and move your work into it",
            )
        )
        return False
    source = ref.source if ref.source is not None else ref.graded_source
    node = (
        nbformat.v4.new_code_cell(source)
        if ref.cell_type == "code"
        else nbformat.v4.new_markdown_cell(source)
    )
    node.pop("id", None)
    at = len(cells)
    if reference.ordered:
        at = _insertion_point(cells, reference, rank)[0]
    cells.insert(at, _Cell(node, None, ref.grade_id))
    place = _place_words(cells, at, reference)
    notes.append(
        Note(
            f"the {ref.kind} `{ref.grade_id}` was missing (deleted, or its grading "
            f"metadata was removed); it was put back from the release"
            + (f", {place}" if place else ""),
            advice=f"the {ref.kind} `{ref.grade_id}` is missing; do not delete "
            "test cells (fetch a fresh copy of the exercise and move your work "
            "into it)",
        )
    )
    return True


def _adopt(ref: KnownCell, candidates: list[_Cell]) -> _Cell | None:
    """The ordinary cell among ``candidates`` that is ``ref`` without its metadata."""
    if not candidates:
        return None
    if ref.locked or not ref.solution:
        same = [c for c in candidates if _is_released_text(ref, c.node)]
        return same[0] if same else None
    if ref.cell_type == "code" and ref.source is not None:
        wanted = _function_names(ref.source)
        if wanted:
            defining = [
                c for c in candidates if wanted & _function_names(_source(c.node))
            ]
            return defining[-1] if defining else None
    return candidates[0] if len(candidates) == 1 else None


def _fix_ids(nb, notes: list[Note]) -> None:
    seen: set[str] = set()
    missing = duplicated = 0
    for index, cell in enumerate(nb.cells):
        cid = cell.get("id")
        if isinstance(cid, str) and _ID_PATTERN.match(cid) and cid not in seen:
            seen.add(cid)
            continue
        if cid is None:
            missing += 1
        else:
            duplicated += 1
        n = index + 1
        new = f"cell-{n}"
        while new in seen or any(c.get("id") == new for c in nb.cells[index + 1 :]):
            n += 1000
            new = f"cell-{n}"
        cell["id"] = new
        seen.add(new)
    inserted = sum(1 for n in notes if "put back from the release" in n.text)
    if missing > inserted:
        notes.append(
            Note(
                f"gave {missing - inserted} cells the ids that notebook format 4.5 "
                "requires",
                routine=True,
            )
        )
    if duplicated:
        notes.append(
            Note(
                f"{duplicated} cells had an id that another cell already had (or an "
                "invalid one); they got new ids",
                routine=True,
            )
        )


# --------------------------------------------------------------------------------
# files and the note in the graded notebook


def repair_file(
    path: str | Path,
    reference: Reference,
    dest: str | Path | None = None,
    *,
    with_notes_cell: bool = False,
) -> RepairResult:
    """Read the notebook at ``path``, repair it and write it to ``dest`` (default:
    ``path``; only ever a private copy, never a student's file). With
    ``with_notes_cell``, a notebook that needed more than routine repairs gets
    :func:`notes_cell` first. Raises :class:`Ungradable`."""
    import nbformat

    path = Path(path)
    nb, notes = read_notebook(path, f"{reference.notebook}.ipynb")
    result = repair_notebook(nb, reference)
    result.notes[:0] = notes
    try:
        nbformat.validate(result.notebook)
    except Exception as exc:  # noqa: BLE001 - a notebook nbformat does not accept
        raise Ungradable(_damage(result, f"{reference.notebook}.ipynb", exc)) from None
    if with_notes_cell and result.texts(routine=False):
        result.notebook.cells.insert(0, notes_cell(result.notes))
        result.origins.insert(0, None)
    nbformat.write(result.notebook, str(dest or path))
    return result


def _damage(result: RepairResult, name: str, exc: Exception) -> str:
    """Why a repaired notebook still fails nbformat's schema, naming the first cell
    that fails it."""
    from nbformat.v4.nbbase import validate

    for cell, origin in zip(result.notebook.cells, result.origins, strict=False):
        try:
            validate(cell, f"{cell['cell_type']}_cell")
        except Exception as cell_exc:  # noqa: BLE001 - the schema's complaint
            where = f"cell {origin}" if origin else "a cell"
            return (
                f"{where} of {name} is damaged ({_plain(cell_exc)}); open the "
                "notebook in JupyterLab, delete or retype that cell and submit it again"
            )
    return (
        f"{name} is damaged in a way grading cannot repair ({_plain(exc)}); open it "
        "in JupyterLab, save it and submit it again"
    )


def notes_cell(notes: Iterable[Note | str]):
    """A markdown cell, first in the graded notebook, that lists the repairs (it
    reaches the student's feedback page)."""
    import nbformat

    notes = [n if isinstance(n, Note) else Note(str(n)) for n in notes]
    lines = [
        _NOTES_TITLE,
        "Your notebook had accidents that grading repaired, so that it was graded "
        "as you meant it:",
        "",
        *(f"- {n.text}" for n in notes if not n.routine),
    ]
    routine = [n.text for n in notes if n.routine]
    if routine:
        lines += ["", "Routine clean-up: " + "; ".join(routine) + "."]
    cell = nbformat.v4.new_markdown_cell("\n".join(lines))
    cell["id"] = NOTES_CELL_ID
    # the list itself, for the tool: the text is rendered (and, in the autograded
    # copy, made inert: course_lib.grading.notebooks.safe) for people
    cell["metadata"][_NOTES_KEY] = [n.text for n in notes if not n.routine]
    return cell


def notes_from_notebook(path: str | Path) -> list[str]:
    """The repairs listed in a graded notebook's notes cell, routine clean-up left
    out (none: ``[]``)."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    for cell in nb.get("cells", [])[:3]:
        if isinstance(cell, dict) and cell.get("id") == NOTES_CELL_ID:
            listed = (cell.get("metadata") or {}).get(_NOTES_KEY)
            if isinstance(listed, list):
                return [str(text) for text in listed]
            return [
                ln[2:].strip()
                for ln in _source(cell).splitlines()
                if ln.startswith("- ")
            ]
    return []
