"""Bug zoo of exercise 1: correct variants the graders must accept and wrong
implementations they must reject, with the message fragment each rejection shows.

``WRONG[name]`` lists ``(function, fragment, public)``: ``public`` says whether the
public check (not only the hidden grader) must reject it too. ``CALLS_LIBRARY[name]``
lists functions that only call the reference, through ``course_lib.<name>`` and
through a module-level ``from course_lib import <name>``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

import course_lib
from course_lib import permutation_matrix, self_attention

# --- self_attention: correct


def sa_softmax(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(w_q.shape[1]), -1) @ v


def sa_loops(x, w_q, w_k, w_v):
    """The paper's equation entry by entry, in float64 Python, batch by batch."""
    batched = x.ndim == 3
    xs = x if batched else x[None]
    outs = []
    for xb in xs:
        q, k, v = [(xb.double() @ w.double()).tolist() for w in (w_q, w_k, w_v)]
        d_k = len(q[0])
        rows = []
        for qi in q:
            scores = [sum(a * b for a, b in zip(qi, kj, strict=True)) / math.sqrt(d_k)
                      for kj in k]
            top = max(scores)
            e = [math.exp(s - top) for s in scores]
            total = sum(e)
            rows.append([sum(e[j] / total * v[j][c] for j in range(len(v)))
                         for c in range(len(v[0]))])
        outs.append(rows)
    out = torch.tensor(outs, dtype=x.dtype)
    return out if batched else out[0]


def sa_einsum_float64(x, w_q, w_k, w_v):
    x64 = x.double()
    q = torch.einsum("...sd,dk->...sk", x64, w_q.double())
    k = torch.einsum("...sd,dk->...sk", x64, w_k.double())
    v = torch.einsum("...sd,dv->...sv", x64, w_v.double())
    scores = torch.einsum("...ik,...jk->...ij", q, k) / q.shape[-1] ** 0.5
    return (scores.softmax(dim=-1) @ v).to(x.dtype)


def sa_torch_sdpa(x, w_q, w_k, w_v):
    """PyTorch's fused attention (its default scale is 1/sqrt(q.shape[-1]) = d_k)."""
    return torch.nn.functional.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)


def sa_numpy(x, w_q, w_k, w_v):
    """NumPy inside, back to a tensor of x's dtype."""
    xs, q_w, k_w, v_w = (t.numpy() for t in (x, w_q, w_k, w_v))
    q, k, v = xs @ q_w, xs @ k_w, xs @ v_w
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q_w.shape[1])
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return torch.tensor(e / e.sum(axis=-1, keepdims=True) @ v, dtype=x.dtype)


def sa_manual_softmax(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    e = torch.exp(s - s.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True) @ v


# --- self_attention: wrong


def sa_no_scale(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.transpose(-2, -1), -1) @ v


def sa_softmax_over_queries(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(w_q.shape[1]), -2) @ v


def sa_softmax_dim1(x, w_q, w_k, w_v):
    """Right for 2-D x, but dim=1 is the query axis of a batched input."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(w_q.shape[1]), 1) @ v


def sa_divide_by_d_k(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.transpose(-2, -1) / w_q.shape[1], -1) @ v


def sa_scale_d_model(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), -1) @ v


def sa_causal(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = q @ k.transpose(-2, -1) / math.sqrt(w_q.shape[1])
    n = x.shape[-2]
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def sa_keys_times_queries(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(k @ q.transpose(-2, -1) / math.sqrt(w_q.shape[1]), -1) @ v


def sa_returns_weights(x, w_q, w_k, w_v):
    q, k = x @ w_q, x @ w_k
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(w_q.shape[1]), -1)


def sa_weights_times_x(x, w_q, w_k, w_v):
    q, k = x @ w_q, x @ w_k
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(w_q.shape[1]), -1) @ x


def sa_scales_w_q_in_place(x, w_q, w_k, w_v):
    """Right output, but the caller's w_q is divided by sqrt(d_k) for good."""
    w_q /= math.sqrt(w_q.shape[1])
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.transpose(-2, -1), -1) @ v


def sa_always_float32(x, w_q, w_k, w_v):
    return sa_softmax(x.float(), w_q.float(), w_k.float(), w_v.float())


# --- permutation_matrix: correct


def perm_eye_rows(perm):
    perm = torch.as_tensor(perm)
    return torch.eye(len(perm))[perm]


def perm_loop(perm):
    n = len(perm)
    p = torch.zeros(n, n)
    for i, j in enumerate(perm):
        p[i, int(j)] = 1.0
    return p


def perm_one_hot(perm):
    perm = torch.as_tensor(perm, dtype=torch.long)
    return torch.nn.functional.one_hot(perm, len(perm)).float()


def perm_numpy(perm):
    p = np.asarray(perm)
    return torch.from_numpy(np.eye(len(p), dtype=np.float32)[p])


def perm_scatter(perm):
    perm = torch.as_tensor(perm, dtype=torch.long)
    n = perm.numel()
    return torch.zeros(n, n).scatter_(1, perm[:, None], 1.0)


# --- permutation_matrix: wrong


def perm_transposed(perm):
    return perm_loop(perm).T


def perm_argsort(perm):
    """The inverse permutation again, written another way."""
    return torch.eye(len(perm))[torch.argsort(torch.as_tensor(perm))]


def perm_identity(perm):
    return torch.eye(len(perm))


def perm_integer(perm):
    perm = torch.as_tensor(perm, dtype=torch.long)
    return torch.nn.functional.one_hot(perm, len(perm))


def perm_one_hot_float64(perm):
    """Right entries, but a float64 P cannot multiply the float32 x of the task."""
    perm = torch.as_tensor(perm, dtype=torch.long)
    return torch.nn.functional.one_hot(perm, len(perm)).double()


def perm_sorts_its_list(perm):
    """Right matrix, but list.sort() reorders the caller's permutation."""
    p = perm_loop(perm)
    if isinstance(perm, list):
        perm.sort()
    return p


def perm_sparse(perm):
    """A sparse matrix: P @ x works, but the task asks for a dense float32 matrix."""
    n = len(perm)
    index = torch.stack((torch.arange(n), torch.as_tensor(perm)))  # (2, n)
    return torch.sparse_coo_tensor(index, torch.ones(n), (n, n))


def perm_vector(perm):
    return torch.as_tensor(perm, dtype=torch.float32)


# --- calls the library


def sa_calls_library(x, w_q, w_k, w_v):
    return course_lib.self_attention(x, w_q, w_k, w_v)


def sa_imported_from_library(x, w_q, w_k, w_v):
    return self_attention(x, w_q, w_k, w_v)


def perm_calls_library(perm):
    return course_lib.permutation_matrix(perm)


def perm_imported_from_library(perm):
    return permutation_matrix(perm)


CORRECT = {
    "self_attention": [sa_softmax, sa_loops, sa_einsum_float64, sa_manual_softmax,
                       sa_torch_sdpa, sa_numpy],
    "permutation_matrix": [perm_eye_rows, perm_loop, perm_one_hot, perm_scatter,
                           perm_numpy],
}

WRONG = {
    "self_attention": [
        (sa_no_scale, "not divided by sqrt(d_k)", True),
        (sa_softmax_over_queries, "softmax runs over the wrong axis", True),
        (sa_softmax_dim1, "softmax runs over the wrong axis", True),
        (sa_divide_by_d_k, "divided by d_k; divide by sqrt(d_k)", True),
        (sa_scale_d_model, "divided by sqrt(d_model)", True),
        (sa_causal, "causal mask", True),
        (sa_keys_times_queries, "K Q^T instead of Q K^T", True),
        (sa_returns_weights, "attention-weight matrix", True),
        (sa_weights_times_x, "multiply x instead of the values", True),
        (sa_always_float32, "should keep the dtype of x", True),
        (sa_scales_w_q_in_place, "changed its input w_q in place", True),
    ],
    "permutation_matrix": [
        (perm_transposed, "transposed matrix (the inverse permutation)", True),
        (perm_argsort, "transposed matrix (the inverse permutation)", True),
        (perm_identity, "identity matrix", True),
        (perm_integer, "should be a floating-point tensor", True),
        (perm_vector, "returned a vector", True),
        (perm_one_hot_float64, "instead of torch.float32; the task asks for float32",
         True),
        (perm_sorts_its_list, "changed its input perm in place", True),
        (perm_sparse, "should be an ordinary dense tensor", True),
    ],
}

CALLS_LIBRARY = {
    "self_attention": [sa_calls_library, sa_imported_from_library],
    "permutation_matrix": [perm_calls_library, perm_imported_from_library],
}
