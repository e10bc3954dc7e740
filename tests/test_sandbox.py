"""The grading sandbox and the out-of-kernel judging of test cells.

Fast tests: the record format (every dtype round-trips, malformed records are
rejected), the replay of a grader from a record (the verdict equals the grader's own;
missing calls, changed inputs and changed call names are caught), the detection of
replaced graders and torch functions, the parsing of test cells, the sandbox's
settings. Slow tests (marked): a real kernel in the sandbox, and ``course
autograde`` refusing to run without one.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
from conftest import course_cli

import course_lib.checks.ex05_alibi as ex05
from course_lib import alibi_bias as ref_alibi_bias
from course_lib import alibi_slopes as ref_alibi_slopes
from course_lib.checks import _record
from course_lib.checks._core import CheckFailed
from course_lib.grading.kernels.sandbox import (
    SandboxError,
    SandboxLauncher,
    SandboxSettings,
    sandbox_problem,
)
from course_lib.grading.notebooks.integrity import (
    GraderCall,
    grader_calls,
    pristine_graders,
)

ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------- the record format

DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
]


def _through_json(value):
    return _record.decode(json.loads(json.dumps(_record.encode(value))))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3, 4)])
def test_tensors_round_trip_bit_for_bit(dtype, shape, gen):
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 50).to(dtype)
    got = _through_json(x)
    assert type(got) is torch.Tensor
    assert got.dtype == dtype and got.shape == x.shape
    assert torch.equal(got.view(-1).view(torch.uint8), x.view(-1).view(torch.uint8))


def test_views_subclasses_and_numpy_round_trip(gen):
    x = torch.randn(4, 5, generator=gen)
    assert torch.equal(_through_json(x.t()), x.t())  # non-contiguous view
    assert torch.equal(_through_json(x.conj()), x)
    z = torch.randn(3, generator=gen, dtype=torch.complex64)
    assert torch.equal(_through_json(z.conj()), z.conj().resolve_conj())
    param = torch.nn.Parameter(x.clone())
    got = _through_json(param)
    assert type(got) is torch.Tensor and torch.equal(got, x)
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = _through_json(arr)
    assert isinstance(got, np.ndarray) and got.dtype == arr.dtype
    assert np.array_equal(got, arr)
    scalar = _through_json(np.float32(0.25))
    assert type(scalar) is np.float32 and scalar == np.float32(0.25)


def test_python_values_and_containers_round_trip():
    value = {
        "a": (1, 2.5, None, True, "text"),
        "b": [float("nan"), float("inf"), -float("inf")],
        "c": {"nested": (torch.tensor([1, 2]),)},
    }
    got = _through_json(value)
    assert got["a"] == (1, 2.5, None, True, "text")
    assert math.isnan(got["b"][0]) and got["b"][1:] == [math.inf, -math.inf]
    assert torch.equal(got["c"]["nested"][0], torch.tensor([1, 2]))


def test_dicts_keyed_by_numbers_round_trip():
    value = {8: 0.5, 16: 0.25, "name": None, 2.5: True}
    got = _through_json(value)
    assert got == value and [type(k) for k in got] == [int, int, str, float]
    assert type(_through_json({(1, 2): 3})).__name__ == "dict"  # tuple keys: opaque
    with pytest.raises(ValueError, match="key"):
        _record.decode({"dict": [[{"list": [1]}, 2]]})


def test_a_grader_calling_the_function_directly_cannot_be_replayed():
    fn = _record.StudentFunction("log_distance_bias")

    def grader(f):
        try:
            f(4, 8)
        except Exception:  # noqa: BLE001 - graders wrap errors of the function
            raise CheckFailed("wrapped") from None

    with pytest.raises(_record.Unreplayable, match="directly"):
        grader(fn)


def test_other_objects_are_recorded_by_type_name_only():
    class Sneaky:
        def __reduce__(self):  # pragma: no cover - never called
            raise AssertionError("pickled")

    got = _through_json(Sneaky())
    assert type(got).__name__ == "Sneaky"
    assert not hasattr(got, "__reduce_ex__") or type(got) is not Sneaky
    assert type(_through_json(torch.ones(2).to_sparse())).__name__.startswith("Tensor")


@pytest.mark.parametrize(
    "bad",
    [
        {"tensor": ["object", [1], ""]},  # dtype not allowed
        {"tensor": ["float32", [2], "AAAA"]},  # 3 bytes for 8
        {"tensor": ["float32", [-1], ""]},  # negative size
        {"tensor": ["float32", [1], "!!!!"]},  # not base64
        {"ndarray": ["O", [1], ""]},  # object arrays
        {"pickle": "gASV"},  # unknown tag
        {"list": [1], "tuple": [2]},  # two tags
        {"float": "1e308"},  # only nan and infinities
        [1, 2],  # a bare list
    ],
)
def test_malformed_records_are_rejected(bad):
    with pytest.raises(ValueError):
        _record.decode(bad)


def test_deep_or_oversized_records_are_rejected():
    deep: object = 1
    for _ in range(40):
        deep = {"list": [deep]}
    with pytest.raises(ValueError):
        _record.decode(deep)
    big = _record.encode(torch.zeros(1000))
    with pytest.raises(ValueError):
        _record.decode(big, _record._Budget(100))


def test_too_large_answers_become_opaque():
    budget = _record._Budget(1000)
    encoded = _record.encode(torch.zeros(1000), budget)
    assert encoded == {"opaque": "Tensor (too large to record)"}


# ------------------------------------------------------------- record and replay


def _record_run(grader, fn) -> tuple[list[dict], str | None]:
    """Run ``grader(fn)`` the way a grading kernel does; the record (through JSON,
    as it travels) and the grader's own verdict (None: passed)."""
    recorder = _record._Recorder()
    previous, _record._session = _record._session, recorder
    verdict = None
    try:
        grader(fn)
    except CheckFailed as exc:
        verdict = str(exc)
    finally:
        _record._session = previous
    return json.loads(json.dumps(recorder.events)), verdict


def _replay(grader, events, name="alibi_bias") -> str | None:
    with _record.replaying(events):
        try:
            grader(_record.StudentFunction(name))
        except CheckFailed as exc:
            return str(exc)
    return None


def _right_slopes(n_heads):
    """The paper's slopes, written out here (the reference must not be called)."""
    c = 2 ** math.floor(math.log2(n_heads))
    first = [2 ** (-8 * h / c) for h in range(1, c + 1)]
    extra = [2 ** (-8 * (2 * j + 1) / (2 * c)) for j in range(n_heads - c)]
    return torch.tensor(first + extra, dtype=torch.float32)


def _right_bias(n_heads, seq_len):
    pos = torch.arange(seq_len)
    distance = (pos[:, None] - pos[None, :]).abs()
    return -_right_slopes(n_heads)[:, None, None] * distance


def _wrong_bias(n_heads, seq_len):
    pos = torch.arange(seq_len)
    return -_right_slopes(n_heads)[:, None, None] * (pos[:, None] - pos[None, :])


@pytest.mark.parametrize("fn", [_right_bias, _wrong_bias, ref_alibi_bias])
def test_replay_gives_the_graders_own_verdict(fn):
    events, verdict = _record_run(ex05.grade_alibi_bias, fn)
    assert events, "the grader's calls were recorded"
    assert _replay(ex05.grade_alibi_bias, events) == verdict
    if fn is _right_bias:
        assert verdict is None
    else:
        assert verdict is not None


def test_replay_passes_prints_and_uses_the_recorded_answers(capsys):
    events, verdict = _record_run(ex05.grade_alibi_slopes, _right_slopes)
    assert verdict is None
    capsys.readouterr()
    assert _replay(ex05.grade_alibi_slopes, events, "alibi_slopes") is None
    assert "alibi_slopes: passed" in capsys.readouterr().out
    # A record whose answers are wrong fails, whatever the kernel said.
    wrong = copy.deepcopy(events)
    wrong[-1]["result"] = _record.encode(torch.ones(3))
    assert _replay(ex05.grade_alibi_slopes, wrong, "alibi_slopes") is not None


def test_a_missing_call_is_tampering():
    events, _ = _record_run(ex05.grade_alibi_bias, _right_bias)
    with pytest.raises(_record.Tampered, match="never called"):
        _replay(ex05.grade_alibi_bias, events[:-1])
    with pytest.raises(_record.Tampered, match="never called"):
        _replay(ex05.grade_alibi_bias, [])


def test_changed_inputs_or_calls_are_tampering():
    events, _ = _record_run(ex05.grade_alibi_bias, _right_bias)
    changed = copy.deepcopy(events)
    changed[0]["args"] = _record.encode([[4, 6], {}])
    with pytest.raises(_record.Tampered, match="differ from the grader's own"):
        _replay(ex05.grade_alibi_bias, changed)
    renamed = copy.deepcopy(events)
    renamed[0]["call"] = "alibi_bias(1, 1)"
    with pytest.raises(_record.Tampered, match="reports"):
        _replay(ex05.grade_alibi_bias, renamed)
    malformed = copy.deepcopy(events)
    malformed[0]["result"] = {"tensor": ["float32", [3], "AAAA"]}
    with pytest.raises(_record.Tampered, match="malformed"):
        _replay(ex05.grade_alibi_bias, malformed)


def test_a_float64_default_dtype_replays_faithfully():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        events, verdict = _record_run(ex05.grade_alibi_bias, _right_bias)
    finally:
        torch.set_default_dtype(previous)
    assert verdict is None
    with _record.replaying(events, "float64"):
        ex05.grade_alibi_bias(_record.StudentFunction("alibi_bias"))
    assert torch.get_default_dtype() == previous


def test_the_recorder_sees_replaced_graders_torch_and_references(monkeypatch):
    recorder = _record._Recorder()
    assert recorder.tampering([]) == []
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    monkeypatch.setattr(ex05, "grade_alibi_bias", lambda fn: None)
    monkeypatch.setattr(ref_alibi_slopes, "__code__", _right_slopes.__code__)
    seen = recorder.tampering([])
    assert "torch.allclose" in seen
    assert "course_lib.checks.ex05_alibi.grade_alibi_bias" in seen
    assert "course_lib.alibi.alibi_slopes" in seen
    monkeypatch.undo()
    assert recorder.tampering([]) == []


def test_probe_reports_values_events_and_state():
    previous, _record._session = _record._session, _record._Recorder()
    try:
        ex05.check_alibi_slopes(_right_slopes)
        report = json.loads(
            _record.probe(7, ["check_alibi_slopes"], 0.5, _right_slopes)
        )
    finally:
        _record._session = previous
    assert report["active"] is True and report["tamper"] == []
    assert report["args"] == [0.5, {"callable": "_right_slopes"}]
    assert report["default_dtype"] == "float32"
    assert [e["call"] for e in report["events"]][:1] == ["alibi_slopes(8)"]
    assert json.loads(_record.probe(8, []))["active"] is False


# ------------------------------------------------------------- test cell parsing


def test_grader_calls_reads_the_exercise_test_cells():
    graders = pristine_graders()
    imported: dict[str, str] = {}
    public = (
        "from course_lib.checks.ex05_alibi import check_alibi_bias\n"
        "from course_lib.checks.ex05_alibi import grade_alibi_bias\n\n"
        "# Public checks.\ncheck_alibi_bias(alibi_bias)"
    )
    assert grader_calls(public, graders, imported) == [
        GraderCall(
            "check_alibi_bias",
            "course_lib.checks.ex05_alibi",
            (("name", "alibi_bias"),),
        )
    ]
    assert imported["grade_alibi_bias"] == "course_lib.checks.ex05_alibi"
    hidden = (
        "### BEGIN HIDDEN TESTS\ngrade_alibi_bias(alibi_bias)\n### END HIDDEN TESTS"
    )
    assert grader_calls(hidden, graders, imported)[0].grader == "grade_alibi_bias"
    hand = "grade_hand_computation(pe0_dot_pe1, 1.0, pe0_dot_pe5)"
    assert grader_calls(hand, graders, {})[0].args == (
        ("name", "pe0_dot_pe1"),
        ("const", 1.0),
        ("name", "pe0_dot_pe5"),
    )


@pytest.mark.parametrize(
    "source",
    [
        "assert alibi_bias(1, 1).shape == (1, 1, 1)",
        "grade_alibi_bias(alibi_bias); x = 1",
        "grade_alibi_bias(fn=alibi_bias)",
        "grade_alibi_bias(lambda n, s: alibi_bias(n, s))",
        "import os\ngrade_alibi_bias(alibi_bias)",
        "not_a_grader(alibi_bias)",
        "grade_alibi_bias(alibi_bias",
        "",
    ],
)
def test_other_test_cells_keep_the_kernels_verdict(source):
    assert grader_calls(source, pristine_graders(), {}) is None


# ------------------------------------------------------------- sandbox settings


def test_a_missing_bubblewrap_is_named():
    launcher = SandboxLauncher(SandboxSettings(bwrap="/nonexistent/bwrap"))
    problem = sandbox_problem(launcher)
    assert problem is not None and "bubblewrap" in problem
    with pytest.raises(SandboxError, match="apt-get install bubblewrap"):
        launcher.bwrap_path()


def test_a_bind_that_would_show_a_protected_folder_is_refused(tmp_path):
    inside_env = os.path.join(sys.prefix, "lib")
    launcher = SandboxLauncher(SandboxSettings(protected=(inside_env,)))
    with pytest.raises(SandboxError, match="contains"):
        launcher.ro_binds()
    assert sandbox_problem(launcher) is not None
    # The course folder itself is not bound (only the environment and course_lib).
    fine = SandboxLauncher(SandboxSettings(protected=(str(tmp_path),)))
    assert all(not str(tmp_path).startswith(p) for p in fine.ro_binds())


# ------------------------------------------------------------- a real sandbox

_KERNEL_CELLS = {
    "env": "import os, json\nprint(json.dumps(sorted(os.environ)))",
    "uid": "print(os.getuid())",
    "pids": "print(len([p for p in os.listdir('/proc') if p.isdigit()]))",
    "cwd": (
        "print(json.dumps([sorted(os.listdir('.')), open('data.txt').read()]))\n"
        "open('written.txt', 'w').write('stays in the sandbox')"
    ),
    "readonly": (
        "try:\n    open('data.txt', 'a').write('changed')\n    print('writable')\n"
        "except OSError as exc:\n    print(exc.errno)"
    ),
    "link": (
        "try:\n    print(open('link.txt').read())\nexcept OSError as exc:\n"
        "    print(type(exc).__name__)"
    ),
    "secret": (
        "try:\n    print(open(SECRET).read())\nexcept OSError as exc:\n"
        "    print(type(exc).__name__)"
    ),
    "net": (
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', PORT), 2)\n"
        "    print('connected')\nexcept OSError as exc:\n    print(type(exc).__name__)"
    ),
    "nproc": (
        "import time\nn = 0\nkids = []\ntry:\n    while n < 1000:\n"
        "        pid = os.fork()\n        if pid == 0:\n            time.sleep(2)\n"
        "            os._exit(0)\n        kids.append(pid)\n        n += 1\n"
        "except OSError:\n    pass\nfor k in kids:\n    os.waitpid(k, 0)\nprint(n)"
    ),
    "interrupt": (
        "import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n"
        "    print('interrupted')"
    ),
    "escape": (
        "import subprocess\n"
        "subprocess.Popen(['sleep', MARKER], start_new_session=True)\n"
        "print('started')"
    ),
}


@pytest.fixture(scope="module")
def sandboxed_kernel(tmp_path_factory):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make test installs it)")
    from nbclient import NotebookClient

    from course_lib.grading.kernels.start import (
        GradingKernelManager,
        KernelContext,
        KernelLimits,
        kernel_context,
    )

    tmp = tmp_path_factory.mktemp("sandbox")
    work = tmp / "submission"
    work.mkdir()
    (work / "data.txt").write_text("the submission's file")
    secret = tmp / "secret.txt"
    secret.write_text("instructor only")
    (work / "link.txt").symlink_to(secret)  # must not lead out of the sandbox
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.1)
    marker = f"{uuid.uuid4().int % 10**8}.5"
    header = (
        f"SECRET = {str(secret)!r}\nPORT = {server.getsockname()[1]}\n"
        f"MARKER = {marker!r}"
    )
    cells = [nbformat.v4.new_code_cell(header)] + [
        nbformat.v4.new_code_cell(src) for src in _KERNEL_CELLS.values()
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    settings = SandboxSettings(max_processes=40)
    context = KernelContext(
        limits=KernelLimits(memory=2 << 30, wall_seconds=120),
        launcher=SandboxLauncher(settings),
    )
    os.environ["COURSE_TEST_SECRET_TOKEN"] = "hunter2"
    os.environ["NBGRADER_EXECUTION"] = "autograde"  # as nbgrader's autograde sets it
    try:
        with kernel_context(context):
            client = NotebookClient(
                nb,
                timeout=8,
                interrupt_on_timeout=True,
                allow_errors=True,
                kernel_manager_class=GradingKernelManager,
                resources={"metadata": {"path": str(work)}},
            )
            client.execute()
            alive_during = len(context.pids)
    finally:
        del os.environ["COURSE_TEST_SECRET_TOKEN"]
        del os.environ["NBGRADER_EXECUTION"]
    try:
        server.accept()
        connected = True
    except OSError:
        connected = False
    server.close()
    context.kill()
    outputs = {
        name: "".join(o.get("text", "") for o in cell.outputs).strip()
        for name, cell in zip(_KERNEL_CELLS, nb.cells[1:], strict=True)
    }
    return outputs, work, connected, marker, settings, alive_during


@pytest.mark.slow
def test_the_kernel_sees_no_secret_and_no_host(sandboxed_kernel):
    out, work, connected, _, _, started = sandboxed_kernel
    assert started == 1
    env = json.loads(out["env"])
    assert "COURSE_TEST_SECRET_TOKEN" not in env and "JPY_PARENT_PID" not in env
    # nbgrader's own marker reaches the kernel: a notebook may skip work when graded
    assert "NBGRADER_EXECUTION" in env
    assert out["secret"] == "FileNotFoundError"
    assert out["link"] == "FileNotFoundError"
    assert out["net"] in {"ConnectionRefusedError", "OSError"} and not connected
    if os.geteuid() == 0:
        assert out["uid"] == "65534"
    assert 1 <= int(out["pids"]) <= 3  # the sandbox's init and the kernel


@pytest.mark.slow
def test_the_working_directory_is_a_private_copy(sandboxed_kernel):
    out, work, *_ = sandboxed_kernel
    listing, text = json.loads(out["cwd"])
    assert listing == ["data.txt", "link.txt"] and text == "the submission's file"
    # Bound read-only (EROFS); as root, the sandbox user does not own them either
    # (EACCES comes first).
    assert out["readonly"] in {"30", "13"}
    assert sorted(p.name for p in work.iterdir()) == ["data.txt", "link.txt"]
    assert (work / "data.txt").read_text() == "the submission's file"


@pytest.mark.slow
def test_processes_are_limited_and_interrupts_reach_the_kernel(sandboxed_kernel):
    out, _, _, _, settings, _ = sandboxed_kernel
    assert 0 < int(out["nproc"]) < settings.max_processes
    assert out["interrupt"] == "interrupted"


@pytest.mark.slow
def test_nothing_survives_the_sandbox(sandboxed_kernel):
    out, _, _, marker, _, _ = sandboxed_kernel
    assert out["escape"] == "started"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = [
            p
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and marker.encode() in _cmdline(p)
        ]
        if not alive:
            break
        time.sleep(0.2)
    assert alive == []


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


# ------------------------------------------------------------- the command


def _course(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return course_cli(*args, cwd=cwd, env=env, timeout=300)


@pytest.mark.slow
def test_autograde_refuses_without_a_sandbox_unless_told(tmp_path):
    from course_lib.grading.synthetic import scratch_course

    course = scratch_course(tmp_path / "course", ROOT, ["ex05_alibi"])
    # Released first: autograde names an unreleased assignment before it builds the
    # sandbox, and this test is about the sandbox.
    released = _course(["release", "ex05_alibi"], course.root, dict(os.environ))
    assert released.returncode == 0, released.stderr
    env = {**os.environ, "PATH": str(tmp_path / "no-programs-here")}
    refused = _course(["autograde", "ex05_alibi"], course.root, env)
    assert refused.returncode == 2
    assert "cannot build the sandbox" in refused.stderr
    assert "bubblewrap" in refused.stderr and "--unsafe-no-sandbox" in refused.stderr
    unsafe = _course(
        ["autograde", "ex05_alibi", "--unsafe-no-sandbox"], course.root, env
    )
    assert "WITHOUT a sandbox" in unsafe.stderr
    assert "cannot build the sandbox" not in unsafe.stderr
