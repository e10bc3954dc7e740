"""Graders for ex04_rope: RoPE frequencies, interleaved rotation, and the per-head
conversion of a checkpoint's query/key projections from interleaved to rotate-half.

``check_*`` run in the students' notebooks (public cells); ``grade_*`` run at grading
(hidden cells). Expected answers come from :mod:`course_lib.rope`, captured at import
and computed before the student's function runs. Known wrong answers (the rotate-half
pairing, pairs read as (2i, 2i+1) but written back as [evens | odds], a flipped angle,
reversed positions, exponents off by a factor of 2, a conversion over the whole matrix
instead of per head, the reverse conversion, columns instead of rows, biases left
alone, ...) are computed here, with an independent rotation, so that a wrong answer
is named.

Variants (:data:`VARIANTS`, chosen for a term by ``c.CourseTerm.variants`` in
``nbgrader_config.py``): ``"rotate-half"`` asks ``apply_rope`` for the other pairing
(chapter 4, "Two ways to pair the dimensions", eq. ``rope-half``): dimension ``i``
rotates with dimension ``i + d/2``, as GPT-NeoX and Hugging Face Llama's
``rotate_half`` do. The open edition's answer (the interleaved pairs ``(2i, 2i+1)``)
fails it, and is named as such. ``rope_frequencies`` and
``interleaved_to_half_weights`` ask the same in every variant (the conversion's
target is the rotate-half code, which in this variant is the student's own
``apply_rope``). A term's ``seed`` (``c.CourseTerm.seed``) draws the hidden graders'
sizes, positions and inputs anew.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_lib.conventions import (
    rope_interleaved_to_half_weights as _lib_interleaved_to_half_weights,
)
from course_lib.rope import apply_rope as _ref_apply_rope
from course_lib.rope import (
    interleaved_to_half_permutation as _ref_interleaved_to_half_permutation,
)
from course_lib.rope import rope_frequencies as _ref_rope_frequencies

from ._core import (
    CheckFailed,
    Mistake,
    Variant,
    call_student,
    expect_close,
    passed,
    term_rng,
    variant_named,
)
from .sections import Section

__all__ = [
    "check_apply_rope",
    "check_interleaved_to_half_weights",
    "check_rope_frequencies",
    "grade_apply_rope",
    "grade_interleaved_to_half_weights",
    "grade_rope_frequencies",
]

# Students compute m * theta in float32: ~1e-5 rad at m ~ 60.
_ATOL = 1e-4
_RTOL = 1e-4

EXERCISE = "ex04_rope"
VARIANTS: dict[str, Variant] = {
    "rotate-half": Variant(
        summary=(
            "apply_rope rotates the rotate-half pairs (x_i, x_{i+d/2}) of GPT-NeoX "
            "and Hugging Face Llama instead of the interleaved (x_2i, x_2i+1) "
            "(chapter 4, section 'Two ways to pair the dimensions', eq. rope-half)"
        ),
        references={"apply_rope": "_reference_rotate_half_rope"},
        sections={"apply_rope": Section(
            "book/04-rope", "rope-pairings", "Two ways to pair the dimensions"
        )},
    ),
}


def _known(expected: torch.Tensor, candidates: list[Mistake]) -> list[Mistake]:
    """The known wrong answers that differ from the expected one (for head_dim = 2
    the pairings coincide; at position 0 every rotation is the identity)."""
    out = []
    for m in candidates:
        same = m.answer.shape == expected.shape and torch.allclose(
            m.answer.double(), expected.double(), atol=_ATOL, rtol=_RTOL
        )
        if not same:
            out.append(m)
    return out


# ---- rope_frequencies -----------------------------------------------------------


def _frequency_mistakes(head_dim: int) -> list[Mistake]:
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    d = head_dim
    return [
        Mistake(
            10000.0 ** (-i / d),
            "the exponent is off by a factor of 2: it uses i instead "
            "of 2i; theta_i = 10000^(-2i/head_dim)",
            "exponent-i-not-2i",
        ),
        Mistake(
            10000.0 ** (-4 * i / d),
            "the exponent is off by a factor of 2: 2 * (2i) / d, as when i already "
            "steps "
            "by 2 (torch.arange(0, d, 2)) and is doubled again; theta_i = "
            "10000^(-2i/head_dim)",
            "exponent-4i",
        ),
        Mistake(
            10000.0 ** (2 * i / d),
            "the exponent has the wrong sign: the frequencies must decrease from "
            "theta_0 = 1",
            "exponent-sign",
        ),
        Mistake(
            10000.0 ** (-2 * (i + 1) / d),
            "the frequencies start at i = 1; theta_0 = "
            "10000^0 = 1",
            "starts-at-i-1",
        ),
        Mistake(
            10000.0 ** (-torch.arange(d, dtype=torch.float64) / d),
            "this has head_dim entries; RoPE has one frequency per PAIR of dimensions, "
            "head_dim // 2 of them",
            "one-per-dimension",
        ),
        Mistake(
            10000.0 ** (-2 * torch.arange(d, dtype=torch.float64) / d),
            "this has head_dim entries; RoPE has one frequency per PAIR of dimensions, "
            "head_dim // 2 of them",
            "one-per-dimension-4i",
        ),
    ]


def _check_frequencies(rope_frequencies: Callable, head_dim: int) -> None:
    expected = _ref_rope_frequencies(head_dim)  # (head_dim // 2,)
    mistakes = _known(expected, _frequency_mistakes(head_dim))
    call = f"rope_frequencies({head_dim})"
    got = call_student(rope_frequencies, head_dim, call=call)
    expect_close(got, expected, what=call, atol=1e-6, rtol=1e-4, mistakes=mistakes,
                 dtype="float")


def _public_rope_frequencies(rope_frequencies: Callable) -> None:
    """Public cases: head_dim 4 and 8."""
    for head_dim in (4, 8):
        _check_frequencies(rope_frequencies, head_dim)


def check_rope_frequencies(rope_frequencies: Callable) -> None:
    """Public check: head_dim 4 and 8."""
    _public_rope_frequencies(rope_frequencies)
    passed("rope_frequencies", public=True)


# The head size of chapter 4's interactive rope figure (both editions): its data hold
# rope_frequencies of it (course_lib.viz.interactive.ROPE_HEAD_DIM; the test
# test_interactive_figures keeps the two equal), so no term draws it.
_FIGURE_HEAD_DIMS = (14,)


def _hidden_frequency_dims(seed: int | None) -> tuple[int, ...]:
    """The hidden head dimensions: fixed without a term seed; else drawn by the seed
    with the same properties: head_dim 2 (one pair), two odd numbers of pairs, an
    even number of pairs other than the public 4 and 8, two wide heads (64 to 256)."""
    if seed is None:
        return (2, 6, 10, 16, 64, 128)
    rng = term_rng(seed, "grade_rope_frequencies")
    # 6, 10, ..., 62: 3, 5, ..., 31 pairs, but not the head of chapter 4's
    # interactive figure, whose angles at position 1 are its frequencies
    odd = rng.sample([d for d in range(6, 64, 4) if d not in _FIGURE_HEAD_DIMS], 2)
    even = rng.choice(range(12, 64, 4))  # 12, 16, ..., 60: 6, 8, ..., 30 pairs
    wide = rng.sample(range(64, 258, 2), 2)
    return (2, *sorted(odd), even, *sorted(wide))


def grade_rope_frequencies(rope_frequencies: Callable, variant: str | None = None,
                           seed: int | None = None) -> None:
    """Hidden grade: head_dim 2 (one pair), odd numbers of pairs, large head_dim
    (drawn by the term's ``seed`` when there is one). No variant changes the
    frequencies."""
    variant_named(VARIANTS, variant, EXERCISE)
    _public_rope_frequencies(rope_frequencies)
    dims = _hidden_frequency_dims(seed)
    for head_dim in dims:
        _check_frequencies(rope_frequencies, head_dim)
    passed("rope_frequencies", public=False, detail=f"{len(dims)} head dimensions")


# ---- apply_rope -------------------------------------------------------------------


def _rotate(x: torch.Tensor, angles: torch.Tensor, pairing: str) -> torch.Tensor:
    """Rotate ``x`` (..., seq, d) by ``angles`` (seq, d/2), independent of the library.

    ``pairing`` is ``"interleaved"`` (2i, 2i+1), ``"half"`` (i, i + d/2),
    ``"scrambled"``: pairs read as (2i, 2i+1) but written back as [evens | odds], or
    ``"unhalved"``: pairs read as (i, i + d/2) but written back to (2i, 2i+1).
    """
    x = x.double()
    cos, sin = angles.cos(), angles.sin()  # (seq, d/2)
    half = x.shape[-1] // 2
    if pairing in ("half", "unhalved"):
        a, b = x[..., :half], x[..., half:]  # (..., seq, d/2)
    else:
        a, b = x[..., 0::2], x[..., 1::2]  # (..., seq, d/2)
    ra, rb = a * cos - b * sin, a * sin + b * cos  # (..., seq, d/2)
    if pairing in ("interleaved", "unhalved"):
        return torch.stack((ra, rb), dim=-1).flatten(-2)  # (..., seq, d)
    return torch.cat((ra, rb), dim=-1)  # (..., seq, d)


def _position_and_frequency_slips(x: torch.Tensor, positions: torch.Tensor,
                                  pairing: str) -> list[Mistake]:
    """The wrong answers either pairing can have: positions reversed or ignored, the
    exponent off by a factor of 2 either way (rotated with ``pairing``)."""
    d, seq = x.shape[-1], x.shape[-2]
    i = torch.arange(d // 2, dtype=torch.float64)
    pos = positions.double()

    def angles(p: torch.Tensor, t: torch.Tensor = 10000.0 ** (-2 * i / d)
               ) -> torch.Tensor:
        return p[:, None] * t[None, :]  # (seq, d/2)

    return [
        Mistake(
            _rotate(x, angles(pos.flip(0)), pairing),
            "the positions are reversed: token t must be rotated by positions[t]",
            "positions-reversed",
        ),
        Mistake(
            _rotate(x, angles(torch.arange(seq, dtype=torch.float64)), pairing),
            "the positions argument is ignored (0, 1, 2, ... used instead); rotate "
            "token t by positions[t], e.g. an offset when decoding with a KV cache",
            "positions-ignored",
        ),
        Mistake(
            _rotate(x, angles(pos, 10000.0 ** (-i / d)), pairing),
            "the exponent is off by a factor of 2 (i instead of 2i): theta_i = "
            "10000^(-2i/head_dim)",
            "exponent-i-not-2i",
        ),
        Mistake(
            _rotate(x, angles(pos, 10000.0 ** (-4 * i / d)), pairing),
            "the exponent is off by a factor of 2 (2 * 2i): theta_i = "
            "10000^(-2i/head_dim)",
            "exponent-4i",
        ),
    ]


def _rope_mistakes(x: torch.Tensor, positions: torch.Tensor
                   ) -> list[Mistake]:
    d = x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64)
    theta = 10000.0 ** (-2 * i / d)  # (d/2,)
    pos = positions.double()

    def angles(p: torch.Tensor, t: torch.Tensor = theta) -> torch.Tensor:
        return p[:, None] * t[None, :]  # (seq, d/2)

    right = angles(pos)
    return [
        Mistake(
            _rotate(x, right, "half"),
            "this is the rotate-half pairing (i, i + d/2) of GPT-NeoX / Hugging Face "
            "Llama; the exercise asks for the interleaved pairing (2i, 2i+1)",
            "rotate-half",
        ),
        Mistake(
            _rotate(x, right, "scrambled"),
            "the pairs are read as (2i, 2i+1) but written back as [all first | all "
            "second] (torch.cat instead of interleaving): the output dimensions are "
            "permuted; put each rotated pair back at (2i, 2i+1)",
            "scrambled-pairs",
        ),
        Mistake(
            _rotate(x, -right, "interleaved"),
            "the rotation goes the wrong way (the sign of the angle is flipped): "
            "(a, b) -> (a cos - b sin, a sin + b cos)",
            "rotation-reversed",
        ),
        *_position_and_frequency_slips(x, positions, "interleaved"),
        Mistake(
            _rotate(x, right.flip(-1), "interleaved"),
            "the frequencies are in reversed order: pair 0 turns fastest (theta_0 = 1)",
            "frequencies-reversed",
        ),
        Mistake(
            x.double() * right.cos().repeat_interleave(2, dim=-1)
            + x.double() * right.sin().repeat_interleave(2, dim=-1),
            "x * cos + x * sin: the sine term must multiply the rotated partner "
            "(-x[2i+1], x[2i]), not x itself",
            "x-times-sin",
        ),
    ]


def _reference_rotate_half_rope(x: torch.Tensor, positions: torch.Tensor
                                ) -> torch.Tensor:
    """The rotate-half variant's answer: pairs (x_i, x_{i+d/2}) rotated by
    positions * theta_i, in the dtype of ``x``."""
    return _ref_apply_rope(x, positions, convention="half")  # same shape as x


def _rotate_half_rope_mistakes(x: torch.Tensor, positions: torch.Tensor
                               ) -> list[Mistake]:
    """Wrong answers to the rotate-half variant, the open edition's answer first."""
    d = x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64)
    theta = 10000.0 ** (-2 * i / d)  # (d/2,)
    pos = positions.double()
    xd = x.double()
    rotated_half = torch.cat((-xd[..., d // 2:], xd[..., :d // 2]), dim=-1)

    def angles(p: torch.Tensor, t: torch.Tensor = theta) -> torch.Tensor:
        return p[:, None] * t[None, :]  # (seq, d/2)

    right = angles(pos)
    return [
        Mistake(
            _rotate(x, right, "interleaved"),
            "this is the interleaved pairing (2i, 2i+1) of the RoFormer paper and "
            "Meta's LLaMA code, the answer of the open edition's exercise 4; this "
            "term's exercise asks for the rotate-half pairing of GPT-NeoX and "
            "Hugging Face Llama: dimension i rotates with dimension i + d/2, "
            "x * [cos | cos] + rotate_half(x) * [sin | sin] with rotate_half(x) = "
            "[-x[d/2:] | x[:d/2]]",
            "default-variant",
        ),
        Mistake(
            _rotate(x, right, "unhalved"),
            "the pairs are read as (i, i + d/2) but written back to (2i, 2i+1) "
            "(torch.stack(...).flatten(-2) instead of torch.cat): the output "
            "dimensions are permuted; put each rotated pair back at (i, i + d/2)",
            "unhalved-pairs",
        ),
        Mistake(
            _rotate(x, right, "scrambled"),
            "the pairs are read as (2i, 2i+1) (the interleaved pairing) and written "
            "back as two halves; rotate-half reads and writes the pairs "
            "(i, i + d/2): the first half of the head with the second half",
            "scrambled-pairs",
        ),
        Mistake(
            xd * right.cos().repeat_interleave(2, dim=-1)
            + rotated_half * right.sin().repeat_interleave(2, dim=-1),
            "rotate_half(x) is right, but the cos/sin tables repeat each angle in "
            "place ([c0, c0, c1, c1, ...], repeat_interleave, the interleaved "
            "layout); with rotate_half the tables are [cos | cos] and [sin | sin] "
            "(torch.cat((angles, angles), -1)), so that dimensions i and i + d/2 "
            "share the angle of pair i",
            "tables-interleaved",
        ),
        Mistake(
            _rotate(x, -right, "half"),
            "the rotation goes the wrong way (the sign of the angle is flipped, as "
            "with rotate_half(x) = [x[d/2:] | -x[:d/2]]): rotate_half(x) = "
            "[-x[d/2:] | x[:d/2]], so (a, b) -> (a cos - b sin, a sin + b cos)",
            "rotation-reversed",
        ),
        *_position_and_frequency_slips(x, positions, "half"),
        Mistake(
            _rotate(x, right.flip(-1), "half"),
            "the frequencies are in reversed order: pair 0, dimensions (0, d/2), "
            "turns fastest (theta_0 = 1)",
            "frequencies-reversed",
        ),
        Mistake(
            xd * torch.cat((right.cos(), right.cos()), dim=-1)
            + xd * torch.cat((right.sin(), right.sin()), dim=-1),
            "x * cos + x * sin: the sine term must multiply rotate_half(x) = "
            "[-x[d/2:] | x[:d/2]], not x itself",
            "x-times-sin",
        ),
    ]


def _rope_input(
    seed: int, shape: tuple[int, ...], positions: torch.Tensor,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype), positions.long()


_DTYPE_REASON = (
    "the task asks for the dtype of x: rotated queries and keys of another dtype no "
    "longer multiply the rest of the model's tensors (torch does not mix dtypes in "
    "a matrix product)"
)


def _check_rope(apply_rope: Callable, x: torch.Tensor, positions: torch.Tensor,
                *, atol: float = _ATOL, rtol: float = _RTOL,
                variant: str = "default") -> torch.Tensor:
    if variant == "rotate-half":
        expected = _reference_rotate_half_rope(x, positions)  # same shape as x
        mistakes = _known(expected, _rotate_half_rope_mistakes(x, positions))
    else:
        expected = _ref_apply_rope(x, positions)  # same shape as x
        mistakes = _known(expected, _rope_mistakes(x, positions))
    pos_text = positions.tolist()
    if len(pos_text) > 8:
        pos_text = f"[{pos_text[0]}, {pos_text[1]}, ..., {pos_text[-1]}]"
    call = f"apply_rope(x, positions) with x of shape {tuple(x.shape)} and " \
           f"positions {pos_text}"
    x_in = x.clone()
    got = call_student(apply_rope, x_in, positions.clone(), call=call)
    if not torch.equal(x_in, x):
        raise CheckFailed(f"{call} changed its input x in place; return a new tensor "
                          "(x is also used elsewhere, e.g. as the residual)")
    expect_close(got, expected, what=call, atol=atol, rtol=rtol, mistakes=mistakes,
                 dtype=x.dtype, dtype_reason=_DTYPE_REASON)
    return got


def _pairs(variant: str) -> str:
    """The pairs a variant rotates, as the messages name them."""
    if variant == "rotate-half":
        return "each rotate-half pair (x[i], x[i + d/2])"
    return "each pair (x[2i], x[2i+1])"


def _check_rope_properties(apply_rope: Callable, seed: int, head_dim: int,
                           variant: str = "default") -> None:
    """Norms are preserved; q.k after rotation depends only on the position offset;
    position 0 is the identity. Checked on the student's own outputs (they hold in
    either pairing; the messages name the variant's pairs)."""
    pairs = _pairs(variant)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, head_dim, generator=g)  # (1, d)
    k = torch.randn(1, head_dim, generator=g)  # (1, d)
    call = f"apply_rope(x, positions) with x of shape (1, {head_dim})"

    def rot(v: torch.Tensor, m: int) -> torch.Tensor:
        out = call_student(apply_rope, v.clone(), torch.tensor([m]), call=call)
        if not isinstance(out, torch.Tensor) or out.shape != v.shape:
            raise CheckFailed(f"{call} should return a tensor of shape "
                              f"{tuple(v.shape)}")
        return out.double()

    expect_close(rot(q, 0), q.double(), what=f"{call} at position 0 (no rotation: "
                 f"{pairs} turns by 0 * theta_i, the vector is unchanged)",
                 atol=1e-6, rtol=1e-5)
    for m in (3, 17):
        norm = rot(q, m).norm()
        if abs(norm - q.double().norm()) > 1e-4:
            raise CheckFailed(f"{call} at position {m} changed the norm of x from "
                              f"{q.norm().item():.6g} to {norm.item():.6g}; rotating "
                              f"{pairs} preserves lengths")
    base = (rot(q, 7) * rot(k, 2)).sum()
    for shift in (5, 21):
        shifted = (rot(q, 7 + shift) * rot(k, 2 + shift)).sum()
        if abs(shifted - base) > 1e-3:
            raise CheckFailed(
                f"relative property: rope(q, {7 + shift}) . rope(k, {2 + shift}) = "
                f"{shifted.item():.6g} but rope(q, 7) . rope(k, 2) = {base.item():.6g};"
                f" the score must depend only on the offset m - n, as it does "
                f"when {pairs} turns by m * theta_i in both"
            )


def _public_apply_rope(apply_rope: Callable, variant: str = "default") -> None:
    """Public cases: a (batch, heads, seq, d) tensor, an offset, far positions,
    float64, the properties."""
    x, pos = _rope_input(0, (2, 3, 5, 8), torch.arange(5))
    _check_rope(apply_rope, x, pos, variant=variant)
    x, pos = _rope_input(1, (4, 6), torch.arange(10, 14))
    _check_rope(apply_rope, x, pos, variant=variant)
    # Far positions (a long KV cache): a table of angles cached for a fixed length,
    # or positions rounded to a low precision, fail here. float32 angles lose ~1e-4
    # at position 5000, hence the wider tolerance.
    x, pos = _rope_input(18, (2, 3, 8, 8), torch.tensor(
        [1000, 1001, 2047, 2048, 2049, 4095, 4096, 5000]))
    _check_rope(apply_rope, x, pos, atol=2e-3, rtol=1e-3, variant=variant)
    # float64 queries (the answer keeps the dtype of x)
    x, pos = _rope_input(20, (2, 5, 6), torch.arange(3, 8), torch.float64)
    _check_rope(apply_rope, x, pos, variant=variant)
    _check_rope_properties(apply_rope, 2, 8, variant)


def _pairing(variant: str) -> str:
    return "the rotate-half pairing (i, i + d/2)" if variant == "rotate-half" else ""


def check_apply_rope(apply_rope: Callable, variant: str | None = None) -> None:
    """Public check: a (batch, heads, seq, d) tensor, an offset, far positions,
    float64, the properties (``variant="rotate-half"``: the pairs (i, i + d/2))."""
    variant = variant_named(VARIANTS, variant, EXERCISE)
    _public_apply_rope(apply_rope, variant)
    passed("apply_rope", public=True, detail=_pairing(variant))


RopeCase = tuple[int, tuple[int, ...], torch.Tensor, torch.dtype]


def _hidden_rope_cases(seed: int | None) -> tuple[list[RopeCase], list[int], int,
                                                  tuple[int, int]]:
    """The hidden cases of ``grade_apply_rope``: ``(cases, far positions, seed of
    the far input, (seed, head_dim) of the properties)``, each case ``(input seed,
    shape, positions, dtype)``. Fixed without a term seed; else drawn by the seed
    with the same properties: head_dim 2 (one pair) at an offset, one token at a
    position past 0, a (batch, heads, seq, d) tensor, unordered repeated positions
    below 60, an odd number of pairs at an offset, float64, reversed positions on a
    wide head, five unordered far positions up to 9000 (one past 2^13 = 8192, as
    the fixed 9000; the far tolerance is derived for positions up to 9000), and the
    properties on an odd number of pairs."""
    if seed is None:
        g = torch.Generator().manual_seed(42)
        cases = [
            (10, (3, 2), torch.arange(3), torch.float32),
            (11, (1, 16), torch.tensor([9]), torch.float32),
            (12, (2, 4, 7, 16), torch.arange(7), torch.float32),
            (13, (3, 6, 32), torch.randint(0, 60, (6,), generator=g), torch.float32),
            (14, (2, 1, 9, 10), torch.arange(31, 40), torch.float32),
            (15, (5, 12), torch.arange(5), torch.float64),
            (16, (2, 8, 64), torch.arange(8).flip(0), torch.float32),
        ]
        return cases, [7000, 300, 9000, 1, 8191], 19, (17, 12)
    rng = term_rng(seed, "grade_apply_rope")

    def draw() -> int:
        return rng.randrange(2**31)

    start, seq_2 = rng.randint(1, 40), rng.randint(2, 5)
    seq_4, seq_5, seq_7 = rng.randint(3, 9), rng.randint(4, 8), rng.randint(5, 10)
    seq_6 = rng.randint(3, 7)
    offset = rng.randint(20, 200)
    random_positions = [rng.randrange(60) for _ in range(seq_5)]
    cases = [
        (draw(), (seq_2, 2), torch.arange(start, start + seq_2), torch.float32),
        (draw(), (1, 2 * rng.randint(4, 12)), torch.tensor([rng.randint(1, 500)]),
         torch.float32),
        (draw(), (rng.randint(1, 3), rng.randint(2, 6), seq_4, 2 * rng.randint(5, 12)),
         torch.arange(seq_4), torch.float32),
        (draw(), (rng.randint(2, 4), seq_5, 2 * rng.randint(12, 24)),
         torch.tensor(random_positions), torch.float32),
        (draw(), (2, 1, seq_7, 2 * rng.choice((3, 5, 7, 9, 11))),
         torch.arange(offset, offset + seq_7), torch.float32),
        (draw(), (seq_6, 2 * rng.randint(3, 10)), torch.arange(seq_6),
         torch.float64),
        (draw(), (2, 8, 2 * rng.randint(24, 48)), torch.arange(8).flip(0),
         torch.float32),
    ]
    far = rng.sample(range(1, 8192), 4)
    far.insert(rng.randrange(5), rng.randint(8192, 9000))
    return cases, far, draw(), (draw(), 2 * rng.choice((3, 5, 7, 9)))


def grade_apply_rope(apply_rope: Callable, variant: str | None = None,
                     seed: int | None = None) -> None:
    """Hidden grade: head_dim 2, one token, arbitrary positions, float64, properties
    (the cases drawn by the term's ``seed`` when there is one;
    ``variant="rotate-half"``: the pairs (i, i + d/2))."""
    variant = variant_named(VARIANTS, variant, EXERCISE)
    _public_apply_rope(apply_rope, variant)
    cases, far, far_seed, (property_seed, property_dim) = _hidden_rope_cases(seed)
    for input_seed, shape, pos, dtype in cases:
        x, pos = _rope_input(input_seed, shape, pos, dtype)
        _check_rope(apply_rope, x, pos, variant=variant)
    # Unordered far positions; float32 angles are off by up to ~2 * 9000 * 6e-8 rad
    x, pos = _rope_input(far_seed, (3, 5, 6), torch.tensor(far))
    _check_rope(apply_rope, x, pos, atol=1e-2, rtol=1e-3, variant=variant)
    _check_rope_properties(apply_rope, property_seed, property_dim, variant)
    pairing = _pairing(variant)
    passed("apply_rope", public=False,
           detail=(f"{pairing}, " if pairing else "")
           + f"{len(cases) + 1} shapes, properties")


# ---- interleaved_to_half_weights ----------------------------------------------------


def _head_rows(n_heads: int, head_dim: int, within: torch.Tensor) -> torch.Tensor:
    """Row index that reorders the rows of every head by ``within`` (head_dim,)."""
    return (torch.arange(n_heads)[:, None] * head_dim + within[None, :]).flatten()


def _ref_interleaved_to_half_weights(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The expected conversion, with the exercise's signature (head_dim: rows)."""
    return _lib_interleaved_to_half_weights(w, n_heads, w.shape[0] // n_heads)


def _weight_mistakes(w: torch.Tensor, n_heads: int) -> list[Mistake]:
    """Known wrong conversions of a projection ``w`` (rows: n_heads * head_dim)."""
    rows = w.shape[0]
    head_dim = rows // n_heads
    perm = _ref_interleaved_to_half_permutation(head_dim).long()  # evens, then odds
    per_head = _head_rows(n_heads, head_dim, perm)
    out = [
        Mistake(
            w[_head_rows(n_heads, head_dim, torch.argsort(perm))],
            "this is the conversion the other way, rotate-half -> interleaved (rows "
            "[0, d/2, 1, d/2+1, ...] of each head, the reverse_permute of conversion "
            "scripts); interleaved -> rotate-half puts the even rows of each head "
            "first, then the odd ones",
            "inverse-conversion",
        ),
        Mistake(
            w[_ref_interleaved_to_half_permutation(rows).long()],
            "the rows were reordered over the whole projection (all even rows of all "
            f"{n_heads} heads first) instead of inside each head: rows of different "
            "heads got mixed; reorder the head_dim rows of every head separately",
            "whole-projection",
        ),
        Mistake(
            w.clone(),
            "the tensor came back unchanged" + (
                ": a bias is part of the query (q = W x + b), so its entries must be "
                "reordered inside each head exactly like the rows of W"
                if w.dim() == 1 else "; reorder the rows inside each head"),
            "unchanged",
        ),
    ]
    if w.dim() == 2 and w.shape[1] == rows:
        out.append(Mistake(
            w[:, per_head],
            "the columns were reordered instead of the rows: the weight is "
            "stored as nn.Linear stores it, (out, in), and the head "
            "dimensions of q = W x are its rows (output features)",
            "columns-reordered",
        ))
    if w.dim() == 2 and w.shape[1] != rows and w.shape[1] % n_heads == 0:
        # head_dim taken from the input width, as for a square query projection; a
        # key projection with grouped-query attention has fewer rows than columns
        wrong_dim = w.shape[1] // n_heads
        if wrong_dim % 2 == 0 and wrong_dim != head_dim:
            wrong = (w.reshape(n_heads, wrong_dim // 2, 2, -1).transpose(1, 2)
                     .reshape(w.shape))
            out.append(Mistake(
                wrong,
                f"head_dim was taken from the input width ({w.shape[1]} // "
                f"{n_heads} = {wrong_dim}) instead of the number of rows "
                f"({rows} // {n_heads} = {head_dim}): with grouped-query "
                "attention a key projection has fewer rows than the model "
                "width",
                "head-dim-from-input",
            ))
    return out


def _weight_input(seed: int, shape: tuple[int, ...],
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _check_weights(fn: Callable, w: torch.Tensor, n_heads: int) -> torch.Tensor:
    head_dim = w.shape[0] // n_heads
    expected = _ref_interleaved_to_half_weights(w, n_heads)
    mistakes = _known(expected, _weight_mistakes(w, n_heads))
    kind = "bias" if w.dim() == 1 else "weight"
    name = str(w.dtype).removeprefix("torch.")
    dtype = "" if w.dtype == torch.float32 else f", {name}"
    call = (f"interleaved_to_half_weights(w, {n_heads}) with a {kind} w of shape "
            f"{tuple(w.shape)} ({n_heads} heads of {head_dim} rows{dtype})")
    got = call_student(fn, w, n_heads, call=call)
    # a conversion only moves numbers: every entry must be exact
    expect_close(got, expected, what=call, atol=0.0, rtol=0.0, mistakes=mistakes)
    if got.dtype != w.dtype:
        raise CheckFailed(f"{call} has the right values, but its dtype is {got.dtype} "
                          f"instead of {w.dtype}: a converted checkpoint keeps the "
                          "dtype it was stored in")
    return got


def _check_weights_property(fn: Callable, seed: int, n_heads: int, head_dim: int,
                            d_model: int) -> None:
    """Scores of a layer with the converted q/k weights and biases under rotate-half
    RoPE equal the original scores under interleaved RoPE (computed with this
    module's own rotation, not the library's)."""
    g = torch.Generator().manual_seed(seed)
    rows, seq = n_heads * head_dim, 6
    x = torch.randn(seq, d_model, generator=g, dtype=torch.float64)
    w_q, w_k = torch.randn(2, rows, d_model, generator=g, dtype=torch.float64)
    b_q, b_k = torch.randn(2, rows, generator=g, dtype=torch.float64)
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * 10000.0 ** (
        -2 * i / head_dim)  # (seq, d/2)

    def scores(wq, bq, wk, bk, pairing):
        q = (x @ wq.T + bq).view(seq, n_heads, head_dim).transpose(0, 1)
        k = (x @ wk.T + bk).view(seq, n_heads, head_dim).transpose(0, 1)
        q, k = _rotate(q, angles, pairing), _rotate(k, angles, pairing)
        return q @ k.transpose(-2, -1)  # (heads, seq, seq)

    converted = []
    for name, t in (("w_q", w_q), ("b_q", b_q), ("w_k", w_k), ("b_k", b_k)):
        call = (f"interleaved_to_half_weights({name}, {n_heads}) with {name} of "
                f"shape {tuple(t.shape)}")
        got = call_student(fn, t, n_heads, call=call)
        if not isinstance(got, torch.Tensor) or got.shape != t.shape:
            raise CheckFailed(f"{call} should return a tensor of shape "
                              f"{tuple(t.shape)}")
        if got.dtype != t.dtype:
            raise CheckFailed(f"{call} returned {got.dtype} for a {t.dtype} input: a "
                              "converted checkpoint keeps the dtype it was stored in")
        converted.append(got.double())
    expect_close(scores(*converted, "half"), scores(w_q, b_q, w_k, b_k, "interleaved"),
                 what=f"attention scores of {n_heads} heads of {head_dim} dimensions "
                      "with the converted weights and biases under rotate-half RoPE "
                      "(they should equal the original scores under interleaved RoPE)",
                 atol=1e-8, rtol=1e-8)


def _public_interleaved_to_half_weights(fn: Callable) -> None:
    """Public cases: a square query weight, a bias, a grouped-query key weight, a
    bfloat16 weight, a float64 bias, and the scores of a converted layer."""
    _check_weights(fn, _weight_input(0, (16, 16)), 2)  # W_q: 2 heads of 8, d_model 16
    _check_weights(fn, _weight_input(1, (16,)), 2)  # its bias
    _check_weights(fn, _weight_input(2, (16, 32)), 2)  # W_k: 2 KV heads, d_model 32
    # checkpoints are stored in bfloat16 (most) or float64: the dtype is kept
    _check_weights(fn, _weight_input(4, (24, 8), torch.bfloat16), 3)
    _check_weights(fn, _weight_input(5, (12,), torch.float64), 2)
    _check_weights_property(fn, 3, 2, 8, 16)


def check_interleaved_to_half_weights(interleaved_to_half_weights: Callable) -> None:
    """Public check: a square query weight, a bias, a grouped-query key weight, a
    bfloat16 weight, a float64 bias, and the scores of a converted layer."""
    _public_interleaved_to_half_weights(interleaved_to_half_weights)
    passed("interleaved_to_half_weights", public=True)


WeightCase = tuple[int, tuple[int, ...], int, torch.dtype]


def _hidden_weight_cases(seed: int | None) -> tuple[list[WeightCase],
                                                    list[tuple[int, int, int, int]]]:
    """The hidden cases of ``grade_interleaved_to_half_weights``: ``(cases,
    properties)``, each case ``(input seed, shape, n_heads, dtype)``, each property
    ``(seed, n_heads, head_dim, d_model)``. Fixed without a term seed; else drawn by
    the seed with the same properties: one head, head_dim 2 (nothing moves), an odd
    number of pairs in a square weight, many heads, grouped-query keys in bfloat16
    (more columns than rows), a float64 bias, the bias of one head, and the scores
    of a layer with an odd number of pairs and of one head."""
    if seed is None:
        cases = [
            (10, (8, 5), 1, torch.float32),  # one head of 8, d_model 5
            (11, (6, 6), 3, torch.float32),  # head_dim 2: nothing moves
            (12, (24, 24), 4, torch.float32),  # head_dim 6: three pairs
            (13, (128, 64), 8, torch.float32),  # 8 heads of 16, d_model 64
            (14, (32, 128), 2, torch.bfloat16),  # grouped-query keys, bfloat16
            (15, (40,), 4, torch.float64),  # bias of 4 heads of 10
            (16, (12,), 1, torch.float32),  # bias of one head
        ]
        return cases, [(17, 4, 6, 12), (18, 1, 16, 8)]
    rng = term_rng(seed, "grade_interleaved_to_half_weights")

    def draw() -> int:
        return rng.randrange(2**31)

    pairs_2 = rng.randint(2, 6)  # heads of head_dim 2
    heads_3, dim_3 = rng.randint(2, 5), 2 * rng.choice((3, 5, 7))
    heads_4, dim_4 = rng.choice((6, 8, 12)), 2 * rng.randint(4, 10)
    kv_5, dim_5 = rng.randint(2, 4), 2 * rng.randint(4, 12)
    heads_6, dim_6 = rng.randint(2, 6), 2 * rng.randint(3, 8)
    cases = [
        (draw(), (2 * rng.randint(3, 10), rng.randint(3, 12)), 1, torch.float32),
        (draw(), (2 * pairs_2, rng.randint(2, 10)), pairs_2, torch.float32),
        (draw(), (heads_3 * dim_3, heads_3 * dim_3), heads_3, torch.float32),
        (draw(), (heads_4 * dim_4, rng.randint(32, 96)), heads_4, torch.float32),
        (draw(), (kv_5 * dim_5, kv_5 * dim_5 * rng.choice((2, 4))), kv_5,
         torch.bfloat16),
        (draw(), (heads_6 * dim_6,), heads_6, torch.float64),
        (draw(), (2 * rng.randint(2, 12),), 1, torch.float32),
    ]
    properties = [
        (draw(), rng.randint(2, 5), 2 * rng.choice((3, 5, 7)), rng.randint(6, 16)),
        (draw(), 1, 2 * rng.randint(4, 12), rng.randint(4, 12)),
    ]
    return cases, properties


def grade_interleaved_to_half_weights(interleaved_to_half_weights: Callable,
                                      variant: str | None = None,
                                      seed: int | None = None) -> None:
    """Hidden grade: one head, head_dim 2 and odd numbers of pairs, many heads,
    grouped-query keys, bfloat16 and float64, biases, scores (drawn by the term's
    ``seed`` when there is one). No variant changes the conversion: its target is
    rotate-half code, which in the ``rotate-half`` variant is the student's own
    ``apply_rope``."""
    variant_named(VARIANTS, variant, EXERCISE)
    fn = interleaved_to_half_weights
    _public_interleaved_to_half_weights(fn)
    cases, properties = _hidden_weight_cases(seed)
    for input_seed, shape, n_heads, dtype in cases:
        _check_weights(fn, _weight_input(input_seed, shape, dtype), n_heads)
    for property_seed, n_heads, head_dim, d_model in properties:
        _check_weights_property(fn, property_seed, n_heads, head_dim, d_model)
    passed("interleaved_to_half_weights", public=False,
           detail=f"{len(cases)} shapes, scores")
