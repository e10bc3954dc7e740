"""The book's figures: each returns a labelled Figure whose data is the library's.

Expected values are computed here independently (NumPy from the papers' formulas, or a
peer implementation), never read back from the code under test.
"""

from __future__ import annotations

import inspect
import io
import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from course_lib import viz
from course_lib.sinusoidal import sinusoidal_encoding


def _data_axes(fig: Figure):
    """The axes that carry data (colorbars excluded)."""
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def _image(ax) -> np.ndarray:
    assert len(ax.images) == 1, f"expected one image, found {len(ax.images)}"
    return np.asarray(ax.images[0].get_array().filled(np.nan), dtype=np.float64)


def _is_number(text: str) -> bool:
    try:
        float(text.replace("\N{MINUS SIGN}", "-").strip("$"))
    except ValueError:
        return text.startswith("$")  # mathtext ticks such as $\\mathdefault{10^{2}}$
    return True


def _pe_numpy(max_len: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """Vaswani et al. eq. (3.5) by a double loop, interleaved layout."""
    pe = np.zeros((max_len, d_model))
    for p in range(max_len):
        for i in range(d_model // 2):
            angle = p / base ** (2 * i / d_model)
            pe[p, 2 * i] = math.sin(angle)
            pe[p, 2 * i + 1] = math.cos(angle)
    return pe


def _callable_without_arguments(name: str) -> bool:
    params = inspect.signature(getattr(viz, name)).parameters.values()
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in params)


# Figures that need data from the caller are checked by their chapter's own tests.
DEFAULT_FIGURES = [n for n in viz.__all__ if _callable_without_arguments(n)]


def test_the_first_half_figures_have_defaults() -> None:
    mine = {"plot_attention_permutation", "plot_encoding_heatmap", "plot_wavelengths",
            "plot_dot_product_vs_distance", "plot_position_ids", "plot_offset_rotation",
            "plot_rope_pairing", "plot_rope_relative", "plot_rope_decay"}
    assert mine <= set(DEFAULT_FIGURES)


@pytest.mark.parametrize("name", DEFAULT_FIGURES)
def test_every_figure_is_labelled_deterministic_and_renders(name: str) -> None:
    make = getattr(viz, name)
    fig = make()
    assert isinstance(fig, Figure)
    axes = _data_axes(fig)
    assert axes, f"{name} drew no axes"
    buf = io.BytesIO()
    fig.savefig(buf, format="png")  # draws: tick labels exist from here on
    assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    for ax in axes:
        title = ax.get_title() or ax.get_title(loc="left")
        assert title, f"{name}: an axes has no title"
        for axis, label in ((ax.xaxis, ax.get_xlabel()), (ax.yaxis, ax.get_ylabel())):
            ticks = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
            # A numeric scale needs a name; words as tick labels name themselves.
            if ticks and all(_is_number(t) for t in ticks):
                assert label, f"{name}: axes {title!r} has an unnamed numeric axis"
    # Same call, same picture: every image and line is identical.
    again = make()
    for a, b in zip(_data_axes(fig), _data_axes(again), strict=True):
        for ia, ib in zip(a.images, b.images, strict=True):
            np.testing.assert_array_equal(ia.get_array(), ib.get_array())
        for la, lb in zip(a.lines, b.lines, strict=True):
            np.testing.assert_array_equal(la.get_ydata(), lb.get_ydata())


def test_figures_do_not_touch_pyplot_state() -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    viz.plot_encoding_heatmap()
    assert plt.get_fignums() == before


@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_heatmap_image_is_the_encoding(layout: str) -> None:
    fig = viz.plot_encoding_heatmap(40, 16, layout=layout)
    img = _image(_data_axes(fig)[0])
    want = sinusoidal_encoding(40, 16, layout=layout).numpy()
    np.testing.assert_array_equal(img, want)
    expected = _pe_numpy(40, 16)
    if layout == "concat":
        expected = np.concatenate((expected[:, 0::2], expected[:, 1::2]), axis=1)
    np.testing.assert_allclose(img, expected, atol=1e-6)


def test_wavelengths_follow_the_geometric_ladder() -> None:
    d, base = 64, 10000.0
    fig = viz.plot_wavelengths(d, base=base, max_len=50, columns=(0, 5))
    left, right = _data_axes(fig)
    pe = _pe_numpy(50, d)
    np.testing.assert_allclose(left.lines[0].get_ydata(), pe[:, 0], atol=1e-6)
    np.testing.assert_allclose(left.lines[1].get_ydata(), pe[:, 5], atol=1e-6)
    ladder = right.lines[0]
    i = np.arange(d // 2)
    np.testing.assert_allclose(ladder.get_xdata(), i)
    np.testing.assert_allclose(ladder.get_ydata(), 2 * np.pi * base ** (2 * i / d),
                               rtol=1e-12)
    # From 2*pi up to, but not reaching, 2*pi*base (the dashed reference line).
    assert ladder.get_ydata()[0] == pytest.approx(2 * np.pi)
    assert ladder.get_ydata()[-1] < 2 * np.pi * base


def test_dot_product_curves_depend_only_on_the_offset() -> None:
    n, d = 60, 32
    fig = viz.plot_dot_product_vs_distance(n, d, anchors=(0, 10, 30))
    left, right = _data_axes(fig)
    pe = _pe_numpy(n, d)
    np.testing.assert_allclose(_image(left), pe @ pe.T, atol=1e-5)
    omega = 10000.0 ** (-np.arange(0, d, 2) / d)
    for line, p in zip(right.lines[:3], (0, 10, 30), strict=True):
        k = np.asarray(line.get_xdata())
        np.testing.assert_array_equal(k, np.arange(-p, n - p))
        closed_form = np.cos(np.outer(k, omega)).sum(axis=1)
        np.testing.assert_allclose(line.get_ydata(), closed_form, atol=1e-5)


def test_position_ids_figure_labels_real_tokens_in_order() -> None:
    lengths, seq = (4, 1, 3), 5
    fig = viz.plot_position_ids(lengths, seq)
    for ax, left_padded in zip(_data_axes(fig), (False, True), strict=True):
        labels = {}
        for t in ax.texts:
            c, r = (round(v) for v in t.get_position())
            labels[r, c] = t.get_text()
        for r, n in enumerate(lengths):
            real = range(seq - n, seq) if left_padded else range(n)
            for c in range(seq):
                if c in real:
                    assert labels[r, c] == str(c - real.start)
                else:
                    assert labels[r, c].startswith("pad")


def test_offset_rotation_arrows_land_on_the_shifted_encoding() -> None:
    k, positions = 3, (0, 1, 5, 6)
    fig = viz.plot_offset_rotation(k, d_model=4, positions=positions, max_pos=10)
    pe = _pe_numpy(20, 4)
    for i, ax in enumerate(_data_axes(fig)):
        arrows = [p for p in ax.patches if hasattr(p, "_posA_posB")]
        assert len(arrows) == len(positions)
        for arrow, p in zip(arrows, positions, strict=True):
            start, end = (np.asarray(v) for v in arrow._posA_posB)
            np.testing.assert_allclose(start, pe[p, 2 * i : 2 * i + 2], atol=1e-12)
            np.testing.assert_allclose(end, pe[p + k, 2 * i : 2 * i + 2], atol=1e-9)
        dots = ax.lines[0]
        np.testing.assert_allclose(dots.get_xdata(), pe[:11, 2 * i], atol=1e-12)
        np.testing.assert_allclose(dots.get_ydata(), pe[:11, 2 * i + 1], atol=1e-12)


def test_rope_pairing_is_read_from_apply_rope() -> None:
    fig = viz.plot_rope_pairing(8)
    interleaved, half = _data_axes(fig)
    assert interleaved.partners == [1, 0, 3, 2, 5, 4, 7, 6]
    assert half.partners == [4, 5, 6, 7, 0, 1, 2, 3]


def test_rope_relative_scores_depend_on_the_offset_only() -> None:
    q, k = np.array([1.0, 0.2]), np.array([0.6, 0.7])
    fig = viz.plot_rope_relative(tuple(q), tuple(k), ((1, 0), (4, 3), (9, 8), (2, 5)))
    scores = [ax.score for ax in _data_axes(fig)]

    def rot(a: float) -> np.ndarray:
        return np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])

    for (m, n), s in zip(((1, 0), (4, 3), (9, 8), (2, 5)), scores, strict=True):
        assert s == pytest.approx(q @ rot(n - m) @ k, abs=1e-12)
    assert scores[0] == pytest.approx(scores[1], abs=1e-12) == pytest.approx(scores[2])
    assert scores[3] != pytest.approx(scores[0], abs=1e-3)


def test_rope_decay_matches_roformer_bound_and_cosine_sum() -> None:
    d, r_max, bases = 32, 50, (10000.0, 100.0)
    fig = viz.plot_rope_decay(d, r_max, bases=bases)
    left, right = _data_axes(fig)
    r = np.arange(r_max + 1)
    for n, base in enumerate(bases):
        theta = base ** (-2 * np.arange(d // 2) / d)
        partial = np.cumsum(np.exp(1j * np.outer(r, theta)), axis=1)
        np.testing.assert_allclose(left.lines[n].get_ydata(), np.abs(partial).mean(1),
                                   rtol=1e-9)
        np.testing.assert_allclose(right.lines[n].get_ydata(),
                                   2 / d * np.cos(np.outer(r, theta)).sum(1),
                                   atol=1e-12)
    # The bound starts at its maximum, the mean of 1..d/2, and decays.
    assert left.lines[0].get_ydata()[0] == pytest.approx((d // 2 + 1) / 2)
    assert left.lines[0].get_ydata()[-1] < 0.5 * left.lines[0].get_ydata()[0]


def test_attention_permutation_panels_show_equivariance() -> None:
    tokens, perm = ("the", "cat", "chased", "the", "dog"), (0, 4, 2, 3, 1)
    fig = viz.plot_attention_permutation(tokens, perm)
    a, a_perm, a_back = (_image(ax) for ax in _data_axes(fig))
    np.testing.assert_allclose(a.sum(1), 1.0, atol=1e-6)
    p = np.eye(5)[list(perm)]
    np.testing.assert_allclose(a_perm, p @ a @ p.T, atol=1e-6)
    np.testing.assert_allclose(a_back, a, atol=1e-6)
    assert not np.allclose(a_perm, a, atol=1e-3)
    # The two occurrences of "the" share an embedding, hence a row of weights.
    np.testing.assert_allclose(a[0], a[3], atol=1e-7)
    labels = [t.get_text() for t in _data_axes(fig)[1].get_yticklabels()]
    assert labels == ["the", "dog", "chased", "the", "cat"]


@pytest.mark.parametrize("n_heads", [8, 12])
def test_alibi_figure_shows_the_paper_bias(n_heads: int) -> None:
    seq = 7
    fig = viz.plot_alibi_bias(n_heads, seq, heads=(0, n_heads - 1))
    *heat, slopes_ax = _data_axes(fig)
    closest = 2 ** int(math.floor(math.log2(n_heads)))
    expected = [2 ** (-8 * h / closest) for h in range(1, closest + 1)]
    expected += [
        2 ** (-8 * (2 * j + 1) / (2 * closest)) for j in range(n_heads - closest)
    ]
    # the slope panel plots the exponents -log2 m_h; float32 slopes carry a relative
    # error of 2^-24, which moves log2 by 2^-24 / ln 2 < 1e-7
    np.testing.assert_allclose(
        slopes_ax.lines[0].get_ydata(), -np.log2(expected), rtol=0, atol=1e-7
    )
    i, j = np.arange(seq)[:, None], np.arange(seq)[None, :]
    for ax, h in zip(heat, (0, n_heads - 1), strict=True):
        want = np.where(j <= i, -expected[h] * (i - j), np.nan)
        np.testing.assert_allclose(_image(ax), want, rtol=1e-6)


def test_t5_buckets_figure_matches_hugging_face() -> None:
    pytest.importorskip("transformers")
    from transformers.models.t5.modeling_t5 import T5Attention

    fig = viz.plot_t5_buckets(32, 128, span=300)
    ax = _data_axes(fig)[0]
    rel = torch.arange(-300, 301)
    for line, bidirectional in zip(ax.lines[:2], (True, False), strict=True):
        np.testing.assert_array_equal(line.get_xdata(), rel.numpy())
        want = T5Attention._relative_position_bucket(
            rel, bidirectional=bidirectional, num_buckets=32, max_distance=128
        )
        np.testing.assert_array_equal(line.get_ydata(), want.numpy())


def test_da_rescale_curves_follow_the_formula() -> None:
    ws, vs = (-0.5, 0.7), (0.0, 1.5)
    fig = viz.plot_da_rescale(ws, vs, max_distance=10)
    for ax, v in zip(_data_axes(fig), vs, strict=True):
        for line, w in zip(ax.lines[: len(ws)], ws, strict=True):
            r = np.asarray(line.get_xdata())
            want = (1 + np.exp(v)) / (1 + np.exp(v - w * r))
            np.testing.assert_allclose(line.get_ydata(), want, rtol=1e-10)
            assert line.get_ydata()[0] == pytest.approx(1.0)


@pytest.mark.parametrize(("q_len", "k_len"), [(3, 5), (4, 4), (2, 6)])
def test_rel_shift_steps_end_in_distances(q_len: int, k_len: int) -> None:
    from course_lib.transformer_xl import rel_shift

    fig = viz.plot_rel_shift_steps(q_len, k_len)
    first, padded, regrouped, last = (_image(ax) for ax in _data_axes(fig))
    x = np.tile(k_len - 1 - np.arange(k_len, dtype=np.float64), (q_len, 1))
    np.testing.assert_array_equal(first, x)
    np.testing.assert_array_equal(padded[:, 0], 0.0)
    assert regrouped.shape == (k_len + 1, q_len)
    np.testing.assert_array_equal(last, rel_shift(torch.tensor(x).float()).numpy())
    i, j = np.arange(q_len)[:, None], np.arange(k_len)[None, :]
    valid = j <= i + k_len - q_len
    distance = i + k_len - q_len - j
    np.testing.assert_array_equal(last[valid], distance[valid])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: viz.plot_attention_permutation(("a", "b"), (0,)), "perm"),
        (lambda: viz.plot_dot_product_vs_distance(10, 8, anchors=(12,)), "anchors"),
        (lambda: viz.plot_position_ids((7,), 5), "lengths"),
        (lambda: viz.plot_offset_rotation(1, d_model=32), "d_model"),
        (lambda: viz.plot_rope_pairing(7), "head_dim"),
        (lambda: viz.plot_alibi_bias(4, 5, heads=(4,)), "heads"),
        (lambda: viz.plot_rel_shift_steps(5, 3), "k_len"),
    ],
)
def test_bad_arguments_name_the_function_and_argument(call, message: str) -> None:
    with pytest.raises(ValueError, match=rf"^plot_\w+: .*{message}"):
        call()
