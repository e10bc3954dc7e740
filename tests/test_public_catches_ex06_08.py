"""Issue 19: which mistakes of the bug zoos of exercises 6-8 the PUBLIC checks name.

For every graded function the set below lists the zoo mistakes that the public check
rejects, each with its teaching message; every other mistake passes the public check
and is left to the hidden grader, for the reason given. The zoo's own ``public`` flags
(run one by one in test_graders_common.py) must agree with these sets, so a change to a
public check that lets a listed mistake through, or a new zoo mistake, fails here.
"""

from __future__ import annotations

import pytest
from zoo import ex06_relative as z06
from zoo import ex07_transformer_xl as z07
from zoo import ex08_da as z08

from course_lib.checks import CheckFailed
from course_lib.checks import ex06_relative as g06
from course_lib.checks import ex07_transformer_xl as g07
from course_lib.checks import ex08_da as g08

PUBLIC_CATCHES = {
    # Every mistake public: equal lengths with keys beyond the clip, a key/value
    # cache (queries last), a clip wider than the sequence, and float64 inputs.
    "shaw_relative_attention": (g06, z06, {
        "shaw_bins_default_dtype",
        "shaw_clip_off_by_one", "shaw_half_precision", "shaw_no_value_term",
        "shaw_output_only", "shaw_position_unscaled", "shaw_queries_first",
        "shaw_query_minus_key", "shaw_softmax_over_queries",
    }),
    # Every mistake public, the default arguments included (the public check also
    # calls the function with the relative positions alone).
    "t5_relative_position_bucket": (g06, z06, {
        "bucket_abs_in_place", "bucket_causal_abs", "bucket_float",
        "bucket_log_of_max_distance", "bucket_no_clamp", "bucket_no_halving",
        "bucket_sign_flipped", "bucket_causal_default", "bucket_without_defaults",
        "bucket_rounded_up", "bucket_rounded_to_nearest",
    }),
    "rel_shift": (g07, z07, {
        "shift_ascending", "shift_drop_last_row", "shift_identity", "shift_into_x",
        "shift_only_2d", "shift_only_4d", "shift_pad_right", "shift_wrong_direction",
    }),
    "rel_shift_bidirectional": (g07, z07, {
        "bishift_xlnet_without_pad", "bishift_last_columns",
        "bishift_masked_like_causal", "bishift_k_len_off_by_one",
        "bishift_all_columns",
    }),
    "rel_attention_scores": (g07, z07, {
        "scores_bias_added_to_q_in_place", "scores_mask_queries_first",
        "scores_masked_with_zero", "scores_not_scaled", "scores_not_shifted",
        "scores_r_ascending", "scores_u_v_swapped", "scores_unmasked",
    }),
    # Every mistake public: a large v (1000), a negative w, a small w over long
    # distances.
    "da_rescale": (g08, z08, {
        "rescale_exponent_reversed", "rescale_literal_float64", "rescale_math_exp",
        "rescale_no_numerator", "rescale_ratio", "rescale_scales_distance_in_place",
        "rescale_sigmoid", "rescale_sign_flipped", "rescale_w_v_swapped",
        "rescale_clamped_at_one", "rescale_distance_clipped",
    }),
    # Every mistake public: a cache (L_q < L_k), causal cases with and without one,
    # values of another width, and a negative w.
    "da_attention": (g08, z08, {
        "attention_rescale_clamped",
        "attention_causal", "attention_ignores_causal", "attention_mask_before_relu",
        "attention_mask_ignores_cache", "attention_no_relu", "attention_no_rescale",
        "attention_not_scaled", "attention_output_only", "attention_queries_first",
        "attention_rescale_after_softmax", "attention_sign_flipped",
        "attention_signed_distance", "attention_scaled_by_value_width",
    }),
}


@pytest.mark.parametrize("name", sorted(PUBLIC_CATCHES))
def test_public_check_catches_exactly_the_listed_mistakes(name, capsys) -> None:
    grader, zoo, expected = PUBLIC_CATCHES[name]
    check = getattr(grader, f"check_{name}")
    caught = set()
    for fn, fragment, _public in zoo.WRONG[name]:
        try:
            check(fn)
        except CheckFailed as exc:
            assert fragment in str(exc), (fn.__name__, str(exc))
            caught.add(fn.__name__)
    capsys.readouterr()
    assert caught == expected
    assert {fn.__name__ for fn, _, public in zoo.WRONG[name] if public} == expected


def test_ex08_public_cases_include_a_cache_a_causal_mask_and_a_large_v() -> None:
    """The public check itself asks for L_q != L_k, causal=True and v = 1000."""
    calls = []

    def spy_attention(q, k, v, w, v_bias, causal=False):
        calls.append((q.shape[2], k.shape[2], causal))
        return z08.attention_plain(q, k, v, w, v_bias, causal=causal)

    def spy_rescale(distance, w, v):
        calls.append(float(v.max()))
        return z08.rescale_softplus(distance, w, v)

    g08.check_da_attention(spy_attention)
    assert any(lq != lk and not causal for lq, lk, causal in calls)
    assert any(lq == lk and causal for lq, lk, causal in calls)
    assert any(lq != lk and causal for lq, lk, causal in calls)
    calls.clear()
    g08.check_da_rescale(spy_rescale)
    assert max(calls) >= 1000.0
