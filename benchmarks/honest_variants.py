"""Slow but correct answers to every graded function: what students really hand in.

The per-cell time limits of ``nbgrader_config.py`` must cut off a loop that never
ends, and never an honest answer that is merely slow. These are the honest slow
answers: pure Python loops over indices, float64 then cast, nothing vectorised, the
same value recomputed inside a loop, Python lists turned into a tensor at the end.
Each one is correct: it passes its public and hidden graders with full marks
(``tests/test_honest_variants.py`` runs them in-process), and
``python -m benchmarks.solution_cost --variants`` times them in the real sandboxed
grading kernel, cold, to set each assignment's limit above the slowest of them.

``VARIANTS[assignment][function][name]`` is the source of a replacement for the
answer cell ``<function>__answer``: it defines the same names the solution's cell
defines, using only what the notebook's set-up cells import (``math``, ``torch``,
``torch.nn.functional as F`` in ex07) and the notebook's other answers (an
``alibi_bias`` may call the notebook's ``alibi_slopes``). The benchmark runs round
``k`` with every function's ``k``-th variant at once, and the first variant of each
function is a loop over indices (or, for ex11's scalar formulas, float64 torch
scalars): round 0 is the student who wrote everything the slow way (ex05:
``alibi_bias``'s triple loop calls the looping ``alibi_slopes`` for every entry).

Helpers: :func:`answer_cells` (the solution's answer cells, in order),
:func:`variant_answers` (those cells with variant number ``k`` of every function
put in: the notebook ``solution_cost --variants`` runs as round ``k``),
:func:`run_in_process` (exec the answers and the public and hidden test cells in one
namespace, as the kernel does, and raise if any grader fails).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _src(text: str) -> str:
    return textwrap.dedent(text).strip("\n") + "\n"


VARIANTS: dict[str, dict[str, dict[str, str]]] = {
    "ex01_permutation": {
        "self_attention": {
            "python_loops_recompute_keys": _src('''
                def self_attention(x, w_q, w_k, w_v):
                    batched = x.dim() == 3
                    xs = x if batched else x[None]
                    scale = math.sqrt(w_q.shape[1])
                    outs = []
                    for b in range(xs.shape[0]):
                        rows = []
                        for i in range(xs.shape[1]):
                            q_i = xs[b, i] @ w_q
                            scores = []
                            for j in range(xs.shape[1]):
                                k_j = xs[b, j] @ w_k  # recomputed for every query
                                scores.append(float((q_i * k_j).sum()) / scale)
                            top = max(scores)
                            exps = [math.exp(s - top) for s in scores]
                            total = sum(exps)
                            out_i = torch.zeros(w_v.shape[1], dtype=torch.float64)
                            for j in range(xs.shape[1]):
                                v_j = (xs[b, j] @ w_v).double()
                                out_i = out_i + exps[j] / total * v_j
                            rows.append(out_i)
                        outs.append(torch.stack(rows))
                    out = torch.stack(outs).to(x.dtype)
                    return out if batched else out[0]
            '''),
            "python_lists_then_tensor": _src('''
                def self_attention(x, w_q, w_k, w_v):
                    def matmul(a, b):  # lists of rows
                        return [[sum(a_i[t] * b[t][c] for t in range(len(b)))
                                 for c in range(len(b[0]))] for a_i in a]

                    wq, wk, wv = w_q.tolist(), w_k.tolist(), w_v.tolist()
                    batch = x.tolist() if x.dim() == 3 else [x.tolist()]
                    result = []
                    for seq in batch:
                        q, k, v = matmul(seq, wq), matmul(seq, wk), matmul(seq, wv)
                        out = []
                        for q_i in q:
                            s = [sum(a * b for a, b in zip(q_i, k_j))
                                 / math.sqrt(len(wq[0])) for k_j in k]
                            e = [math.exp(t - max(s)) for t in s]
                            p = [t / sum(e) for t in e]
                            out.append([sum(p[j] * v[j][c] for j in range(len(v)))
                                        for c in range(len(v[0]))])
                        result.append(out)
                    out = torch.tensor(result, dtype=x.dtype)
                    return out if x.dim() == 3 else out[0]
            '''),
            "float64_then_cast": _src('''
                def self_attention(x, w_q, w_k, w_v):
                    x64 = x.double()
                    q = x64 @ w_q.double()
                    k = x64 @ w_k.double()
                    v = x64 @ w_v.double()
                    scores = q @ k.transpose(-2, -1) / math.sqrt(w_q.shape[1])
                    top = scores.max(dim=-1, keepdim=True).values
                    weights = torch.exp(scores - top)
                    weights = weights / weights.sum(dim=-1, keepdim=True)
                    return (weights @ v).to(x.dtype)
            '''),
        },
        "permutation_matrix": {
            "python_loops": _src('''
                def permutation_matrix(perm):
                    perm = [int(p) for p in perm]
                    n = len(perm)
                    P = torch.zeros(n, n)
                    for i in range(n):
                        for j in range(n):
                            if perm[i] == j:
                                P[i, j] = 1.0
                    return P
            '''),
            "python_lists_then_tensor": _src('''
                def permutation_matrix(perm):
                    perm = [int(p) for p in perm]
                    rows = []
                    for i in range(len(perm)):
                        row = [0.0] * len(perm)
                        row[perm[i]] = 1.0
                        rows.append(row)
                    return torch.tensor(rows, dtype=torch.float32)
            '''),
            "float64_then_cast": _src('''
                def permutation_matrix(perm):
                    perm = torch.tensor([int(p) for p in perm])
                    n = len(perm)
                    cols = torch.arange(n, dtype=torch.float64)
                    P = (cols[None, :] == perm[:, None].double()).double()
                    return P.float()
            '''),
        },
    },
    "ex02_sinusoidal": {
        "sinusoidal_encoding": {
            "python_loops_recompute_frequency": _src('''
                def sinusoidal_encoding(max_len, d_model):
                    pe = torch.zeros(max_len, d_model)
                    for p in range(max_len):
                        for i in range(0, d_model, 2):
                            w = 1.0 / (10000 ** (i / d_model))  # recomputed every entry
                            pe[p, i] = math.sin(p * w)
                            pe[p, i + 1] = math.cos(p * w)
                    return pe
            '''),
            "python_lists_then_tensor": _src('''
                def sinusoidal_encoding(max_len, d_model):
                    rows = []
                    for p in range(max_len):
                        row = []
                        for i in range(d_model // 2):
                            angle = p / 10000 ** (2 * i / d_model)
                            row += [math.sin(angle), math.cos(angle)]
                        rows.append(row)
                    return torch.tensor(rows, dtype=torch.float32).reshape(
                        max_len, d_model)
            '''),
            "float64_rows_then_cast": _src('''
                def sinusoidal_encoding(max_len, d_model):
                    rows = []
                    for p in range(max_len):
                        two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
                        angle = p / torch.pow(10000.0, two_i / d_model)
                        rows.append(torch.stack([angle.sin(), angle.cos()], dim=1)
                                    .flatten())
                    if not rows:
                        return torch.zeros(0, d_model)
                    return torch.stack(rows).float()
            '''),
        },
        "position_ids_from_attention_mask": {
            "python_loops": _src('''
                def position_ids_from_attention_mask(mask):
                    out = torch.zeros(mask.shape, dtype=torch.long)
                    for b in range(mask.shape[0]):
                        count = 0
                        for t in range(mask.shape[1]):
                            if mask[b, t]:
                                out[b, t] = count
                                count += 1
                    return out
            '''),
            "python_lists_recount": _src('''
                def position_ids_from_attention_mask(mask):
                    rows = mask.tolist()
                    ids = []
                    for row in rows:
                        # counts the real tokens before t again for every t
                        ids.append([sum(1 for s in row[:t] if s) if row[t] else 0
                                    for t in range(len(row))])
                    return torch.tensor(ids, dtype=torch.long).reshape(mask.shape)
            '''),
        },
    },
    "ex03_rotation": {
        "offset_matrix": {
            "python_loops": _src('''
                def offset_matrix(k, d_model):
                    m = torch.zeros(d_model, d_model)
                    h = d_model // 2  # [sin | cos]: pair i on i and i + h
                    for i in range(h):
                        w = 10000 ** (-2 * i / d_model)
                        m[i, i] = math.cos(k * w)
                        m[i, i + h] = math.sin(k * w)
                        m[i + h, i] = -math.sin(k * w)
                        m[i + h, i + h] = math.cos(k * w)
                    return m
            '''),
            "python_lists_every_entry": _src('''
                def offset_matrix(k, d_model):
                    rows = []
                    for r in range(d_model):
                        row = []
                        for c in range(d_model):
                            h = d_model // 2
                            w = 10000 ** (-2 * (r % h) / d_model)  # for every entry
                            if r % h != c % h:
                                row.append(0.0)
                            elif r == c:
                                row.append(math.cos(k * w))
                            elif r < h:
                                row.append(math.sin(k * w))
                            else:
                                row.append(-math.sin(k * w))
                        rows.append(row)
                    return torch.tensor(rows, dtype=torch.float32)
            '''),
            "float64_blocks_then_cast": _src('''
                def offset_matrix(k, d_model):
                    blocks = []
                    for i in range(d_model // 2):
                        w = torch.tensor(10000.0, dtype=torch.float64) ** (
                            -2 * i / d_model)
                        c, s = torch.cos(k * w), torch.sin(k * w)
                        blocks.append(torch.stack([torch.stack([c, s]),
                                                   torch.stack([-s, c])]))
                    m = torch.block_diag(*blocks)  # interleaved, then reordered
                    order = list(range(0, d_model, 2)) + list(range(1, d_model, 2))
                    return m[order][:, order].float()
            '''),
        },
        "hand_computation": {
            "float64_table_loops": _src('''
                table = torch.zeros(40, 6, dtype=torch.float64)
                for p in range(40):
                    for i in range(0, 6, 2):
                        w = 10000.0 ** (-i / 6)
                        table[p, i] = math.sin(p * w)
                        table[p, i + 1] = math.cos(p * w)
                pe1_dot_pe3 = float(table[1] @ table[3])
                pe30_dot_pe32 = float(table[30] @ table[32])
                pe1_dot_pe4 = float(table[1] @ table[4])
            '''),
            "python_loops_recompute": _src('''
                def dot_pe(p, q):
                    total = 0.0
                    for i in range(6):
                        w = 10000 ** (-(2 * (i // 2)) / 6)  # recomputed every term
                        trig = math.sin if i % 2 == 0 else math.cos
                        total += trig(p * w) * trig(q * w)
                    return total


                pe1_dot_pe3 = dot_pe(1, 3)
                pe30_dot_pe32 = dot_pe(30, 32)
                pe1_dot_pe4 = dot_pe(1, 4)
            '''),
        },
    },
    "ex04_rope": {
        "rope_frequencies": {
            "python_lists_then_tensor": _src('''
                def rope_frequencies(head_dim):
                    out = []
                    for i in range(head_dim // 2):
                        out.append(1.0 / (10000 ** (2 * i / head_dim)))
                    return torch.tensor(out, dtype=torch.float32)
            '''),
            "python_loops_into_tensor": _src('''
                def rope_frequencies(head_dim):
                    theta = torch.zeros(head_dim // 2)
                    for i in range(head_dim // 2):
                        theta[i] = math.exp(-2 * i / head_dim * math.log(10000))
                    return theta
            '''),
        },
        "apply_rope": {
            "python_loops_recompute_angles": _src('''
                def apply_rope(x, positions):
                    d = x.shape[-1]
                    flat = x.reshape(-1, x.shape[-2], d)
                    out = flat.clone()
                    for b in range(flat.shape[0]):
                        for s in range(flat.shape[1]):
                            p = float(positions[s])
                            for i in range(d // 2):
                                theta = 10000.0 ** (-2.0 * i / d)  # every pair, again
                                c, sn = math.cos(p * theta), math.sin(p * theta)
                                a = float(flat[b, s, 2 * i])
                                e = float(flat[b, s, 2 * i + 1])
                                out[b, s, 2 * i] = a * c - e * sn
                                out[b, s, 2 * i + 1] = a * sn + e * c
                    return out.reshape(x.shape)
            '''),
            "rotation_matrix_per_position_float64": _src('''
                def apply_rope(x, positions):
                    d = x.shape[-1]
                    theta = rope_frequencies(d).double()
                    rows = []
                    for s in range(x.shape[-2]):
                        R = torch.zeros(d, d, dtype=torch.float64)
                        for i in range(d // 2):
                            angle = float(positions[s]) * theta[i]
                            R[2 * i, 2 * i] = torch.cos(angle)
                            R[2 * i, 2 * i + 1] = -torch.sin(angle)
                            R[2 * i + 1, 2 * i] = torch.sin(angle)
                            R[2 * i + 1, 2 * i + 1] = torch.cos(angle)
                        rows.append(x[..., s, :].double() @ R.T)
                    return torch.stack(rows, dim=-2).to(x.dtype)
            '''),
        },
        "interleaved_to_half_weights": {
            "python_loops_stack_rows": _src('''
                def interleaved_to_half_weights(w, n_heads):
                    head_dim = w.shape[0] // n_heads
                    rows = []
                    for h in range(n_heads):
                        for i in range(0, head_dim, 2):
                            rows.append(w[h * head_dim + i])
                        for i in range(1, head_dim, 2):
                            rows.append(w[h * head_dim + i])
                    return torch.stack(rows)
            '''),
            "index_list_then_copy_rows": _src('''
                def interleaved_to_half_weights(w, n_heads):
                    head_dim = w.shape[0] // n_heads
                    order = []
                    for h in range(n_heads):
                        first = h * head_dim
                        evens = [first + i for i in range(head_dim) if i % 2 == 0]
                        odds = [first + i for i in range(head_dim) if i % 2 == 1]
                        order += evens + odds
                    out = torch.empty_like(w)
                    for new, old in enumerate(order):
                        out[new] = w[old]
                    return out
            '''),
        },
    },
    "ex05_alibi": {
        "alibi_slopes": {
            "python_loops_into_tensor": _src('''
                def alibi_slopes(n_heads):
                    c = 1
                    while c * 2 <= n_heads:
                        c *= 2
                    slopes = torch.zeros(n_heads)
                    for h in range(n_heads):
                        if h < c:
                            slopes[h] = 2 ** (-8 * (h + 1) / c)
                        else:
                            j = h - c
                            slopes[h] = 2 ** (-8 * (2 * j + 1) / (2 * c))
                    return slopes
            '''),
            "authors_recursive_lists": _src('''
                def alibi_slopes(n_heads):
                    def power_of_two(n):
                        start = 2 ** (-2 ** -(math.log2(n) - 3))
                        return [start * start ** i for i in range(n)]

                    if math.log2(n_heads).is_integer():
                        return torch.tensor(power_of_two(n_heads))
                    c = 2 ** math.floor(math.log2(n_heads))
                    extra = power_of_two(2 * c)[0::2][: n_heads - c]
                    return torch.tensor(power_of_two(c) + extra)
            '''),
        },
        "alibi_bias": {
            "triple_loop_recompute_slopes": _src('''
                def alibi_bias(n_heads, seq_len):
                    bias = torch.zeros(n_heads, seq_len, seq_len)
                    for h in range(n_heads):
                        for i in range(seq_len):
                            for j in range(seq_len):
                                # the slopes are recomputed for every entry
                                bias[h, i, j] = -alibi_slopes(n_heads)[h] * abs(i - j)
                    return bias
            '''),
            "python_lists_then_tensor": _src('''
                def alibi_bias(n_heads, seq_len):
                    slopes = alibi_slopes(n_heads).tolist()
                    rows = [[[-slopes[h] * abs(i - j) for j in range(seq_len)]
                             for i in range(seq_len)] for h in range(n_heads)]
                    return torch.tensor(rows, dtype=torch.float32).reshape(
                        n_heads, seq_len, seq_len)
            '''),
        },
    },
    "ex06_relative": {
        "shaw_relative_attention": {
            "quadruple_loop_dot_products": _src('''
                def shaw_relative_attention(q, k, v, a_k, a_v, max_distance):
                    B, H, q_len, dim = q.shape
                    k_len = k.shape[2]
                    out = torch.zeros(B, H, q_len, v.shape[-1], dtype=q.dtype)
                    weights = torch.zeros(B, H, q_len, k_len, dtype=q.dtype)
                    for b in range(B):
                        for h in range(H):
                            for i in range(q_len):
                                pos = i + k_len - q_len  # queries are the last
                                logits = []
                                for j in range(k_len):
                                    d = max(-max_distance, min(max_distance, j - pos))
                                    row = d + max_distance
                                    logit = (torch.dot(q[b, h, i], k[b, h, j])
                                             + torch.dot(q[b, h, i], a_k[row]))
                                    logits.append(float(logit) / math.sqrt(dim))
                                top = max(logits)
                                exps = [math.exp(x - top) for x in logits]
                                total = sum(exps)
                                for j in range(k_len):
                                    d = max(-max_distance, min(max_distance, j - pos))
                                    row = d + max_distance  # recomputed
                                    weights[b, h, i, j] = exps[j] / total
                                    out[b, h, i] += exps[j] / total * (v[b, h, j]
                                                                      + a_v[row])
                    return out, weights
            '''),
            "float64_gathered_tables_then_cast": _src('''
                def shaw_relative_attention(q, k, v, a_k, a_v, max_distance):
                    q_len, k_len, dim = q.shape[2], k.shape[2], q.shape[3]
                    K = max_distance
                    idx = torch.tensor(
                        [[max(-K, min(K, j - (i + k_len - q_len))) + K
                          for j in range(k_len)] for i in range(q_len)],
                        dtype=torch.long).reshape(q_len, k_len)
                    ak = a_k.double()[idx]  # (Lq, Lk, head_dim): a^K_ij for each pair
                    av = a_v.double()[idx]  # (Lq, Lk, head_dim)
                    q64 = q.double()
                    logits = (q64 @ k.double().transpose(-2, -1)
                              + torch.einsum("bhid,ijd->bhij", q64, ak))
                    logits = logits / math.sqrt(dim)
                    w = torch.softmax(logits, dim=-1)
                    out = w @ v.double() + torch.einsum("bhij,ijd->bhid", w, av)
                    return out.to(q.dtype), w.to(q.dtype)
            '''),
        },
        "t5_relative_position_bucket": {
            "python_loop_per_entry": _src('''
                def t5_relative_position_bucket(relative_position, bidirectional=True,
                                                num_buckets=32, max_distance=128):
                    out = []
                    for rp in relative_position.reshape(-1).tolist():
                        rp = int(rp)
                        nb = num_buckets
                        bucket = 0
                        if bidirectional:
                            nb //= 2
                            if rp > 0:
                                bucket += nb
                            n = abs(rp)
                        else:
                            n = max(-rp, 0)
                        max_exact = nb // 2
                        if n < max_exact:
                            bucket += n
                        else:
                            large = max_exact + int(
                                math.log(n / max_exact)
                                / math.log(max_distance / max_exact)
                                * (nb - max_exact))
                            bucket += min(large, nb - 1)
                        out.append(bucket)
                    return torch.tensor(out, dtype=torch.long).reshape(
                        relative_position.shape)
            '''),
            "torch_scalars_in_loop_float64": _src('''
                def t5_relative_position_bucket(relative_position, bidirectional=True,
                                                num_buckets=32, max_distance=128):
                    flat = relative_position.reshape(-1)
                    out = torch.zeros(flat.shape, dtype=torch.long)
                    for idx in range(flat.numel()):
                        rp = flat[idx].double()
                        nb = num_buckets // 2 if bidirectional else num_buckets
                        offset = nb if (bidirectional and rp > 0) else 0
                        n = rp.abs() if bidirectional else torch.clamp(-rp, min=0)
                        max_exact = nb // 2
                        if n < max_exact:
                            out[idx] = offset + int(n)
                        else:
                            scaled = (torch.log(n / max_exact)
                                      / torch.log(torch.tensor(max_distance / max_exact,
                                                               dtype=torch.float64))
                                      * (nb - max_exact))
                            out[idx] = offset + min(max_exact + int(scaled), nb - 1)
                    return out.reshape(relative_position.shape)
            '''),
        },
    },
    "ex07_transformer_xl": {
        "rel_shift": {
            "python_loops_gather": _src('''
                def rel_shift(x):
                    q_len, k_len = x.shape[-2], x.shape[-1]
                    out = torch.zeros_like(x)
                    for i in range(q_len):
                        for j in range(k_len):
                            src = j + q_len - 1 - i
                            if src < k_len:
                                out[..., i, j] = x[..., i, src]
                    return out
            '''),
            "float64_rows_then_cast": _src('''
                def rel_shift(x):
                    q_len, k_len = x.shape[-2], x.shape[-1]
                    rows = []
                    for i in range(q_len):
                        move = q_len - 1 - i
                        row = x[..., i, :].double()
                        zeros = torch.zeros(*row.shape[:-1], move, dtype=torch.float64)
                        rows.append(torch.cat([row[..., move:], zeros], dim=-1))
                    return torch.stack(rows, dim=-2).to(x.dtype)
            '''),
        },
        "rel_attention_scores": {
            "quadruple_loop_dot_products": _src('''
                def rel_attention_scores(q, k, r, u, v):
                    B, H, q_len, dim = q.shape
                    k_len = k.shape[2]
                    scores = torch.empty(B, H, q_len, k_len, dtype=q.dtype)
                    for b in range(B):
                        for h in range(H):
                            for i in range(q_len):
                                for j in range(k_len):
                                    dist = i + k_len - q_len - j
                                    if dist < 0:
                                        scores[b, h, i, j] = float("-inf")
                                        continue
                                    col = k_len - 1 - dist  # r runs in descending order
                                    a_c = torch.dot(q[b, h, i] + u[h], k[b, h, j])
                                    b_d = torch.dot(q[b, h, i] + v[h], r[h, col])
                                    scores[b, h, i, j] = (a_c + b_d) / math.sqrt(dim)
                    return scores
            '''),
            "float64_then_cast": _src('''
                def rel_attention_scores(q, k, r, u, v):
                    q64, k64, r64 = q.double(), k.double(), r.double()
                    u64, v64 = u.double(), v.double()
                    q_len, k_len, dim = q.shape[2], k.shape[2], q.shape[3]
                    content = (q64 + u64[:, None, :]) @ k64.transpose(-2, -1)
                    by_distance = (q64 + v64[:, None, :]) @ r64.transpose(-2, -1)
                    shifted = torch.zeros_like(by_distance)
                    for i in range(q_len):
                        move = q_len - 1 - i
                        shifted[..., i, : k_len - move] = by_distance[..., i, move:]
                    scores = (content + shifted) / math.sqrt(dim)
                    for i in range(q_len):
                        for j in range(k_len):
                            if j > i + k_len - q_len:
                                scores[..., i, j] = float("-inf")
                    return scores.to(q.dtype)
            '''),
        },
        "rel_shift_bidirectional": {
            "python_loops_gather": _src('''
                def rel_shift_bidirectional(x):
                    q_len, width = x.shape[-2], x.shape[-1]
                    k_len = width - q_len + 1
                    out = torch.zeros(*x.shape[:-1], k_len, dtype=x.dtype)
                    for i in range(q_len):
                        for j in range(k_len):
                            out[..., i, j] = x[..., i, j + q_len - 1 - i]
                    return out
            '''),
            "index_lists_per_row": _src('''
                def rel_shift_bidirectional(x):
                    q_len, width = x.shape[-2], x.shape[-1]
                    k_len = width - q_len + 1
                    rows = []
                    for i in range(q_len):
                        cols = [j + q_len - 1 - i for j in range(k_len)]
                        rows.append(x[..., i, torch.tensor(cols, dtype=torch.long)])
                    return torch.stack(rows, dim=-2)
            '''),
        },
    },
    "ex08_da": {
        "da_rescale": {
            "python_loop_per_entry": _src('''
                def da_rescale(distance, w, v):
                    d_b, w_b, v_b = torch.broadcast_tensors(distance, w, v)
                    dtype = (v - w * distance).dtype  # torch's promotion rules

                    def softplus(t):  # log(1 + e^t), stable for large |t|
                        return max(t, 0.0) + math.log1p(math.exp(-abs(t)))

                    out = []
                    for d_i, w_i, v_i in zip(d_b.reshape(-1).tolist(),
                                             w_b.reshape(-1).tolist(),
                                             v_b.reshape(-1).tolist()):
                        out.append(math.exp(softplus(v_i) - softplus(v_i - w_i * d_i)))
                    return torch.tensor(out, dtype=dtype).reshape(d_b.shape)
            '''),
            "float64_then_cast": _src('''
                def da_rescale(distance, w, v):
                    dtype = (v - w * distance).dtype  # torch's promotion rules
                    d64, w64, v64 = distance.double(), w.double(), v.double()
                    zero = torch.zeros((), dtype=torch.float64)
                    # log(1 + e^t) = logaddexp(0, t): no overflow for v = 1000
                    log_r = (torch.logaddexp(zero, v64)
                             - torch.logaddexp(zero, v64 - w64 * d64))
                    return torch.exp(log_r).to(dtype)
            '''),
        },
        "da_attention": {
            "python_loops_per_query": _src('''
                def da_attention(q, k, v, w, v_bias, causal=False):
                    B, H, q_len, dim = q.shape
                    k_len = k.shape[2]
                    out = torch.zeros(B, H, q_len, v.shape[-1], dtype=q.dtype)
                    weights = torch.zeros(B, H, q_len, k_len, dtype=q.dtype)
                    for b in range(B):
                        for h in range(H):
                            for i in range(q_len):
                                pos = i + k_len - q_len
                                scores = []
                                for j in range(k_len):
                                    if causal and j > pos:
                                        scores.append(float("-inf"))
                                        continue
                                    dist = torch.tensor(float(abs(pos - j)))
                                    r_hat = da_rescale(dist, w[h], v_bias[h])
                                    dot = float(torch.dot(q[b, h, i], k[b, h, j]))
                                    scores.append(max(dot, 0.0) * float(r_hat)
                                                  / math.sqrt(dim))
                                top = max(scores)
                                exps = [math.exp(s - top) for s in scores]
                                total = sum(exps)
                                for j in range(k_len):
                                    weights[b, h, i, j] = exps[j] / total
                                out[b, h, i] = weights[b, h, i] @ v[b, h]
                    return out, weights
            '''),
            "float64_then_cast": _src('''
                def da_attention(q, k, v, w, v_bias, causal=False):
                    q_len, k_len = q.shape[2], k.shape[2]
                    q64, k64, v64 = q.double(), k.double(), v.double()
                    rows = []
                    for i in range(q_len):
                        pos = i + k_len - q_len
                        dist = (pos - torch.arange(k_len)).abs().double()  # (Lk,)
                        r_hat = da_rescale(dist, w.double()[:, None],
                                           v_bias.double()[:, None])  # (H, Lk)
                        s = (q64[:, :, i, None, :] @ k64.transpose(-2, -1))[:, :, 0]
                        s = torch.relu(s) * r_hat / math.sqrt(q.shape[-1])  # (B, H, Lk)
                        if causal:
                            s = s.masked_fill(torch.arange(k_len) > pos, float("-inf"))
                        rows.append(torch.softmax(s, dim=-1))
                    weights = torch.stack(rows, dim=2)  # (B, H, Lq, Lk)
                    return (weights @ v64).to(q.dtype), weights.to(q.dtype)
            '''),
        },
    },
    "ex09_bug_zoo": {
        "fixed_rope_cos_sin": {
            "python_loops_float64_then_cast": _src('''
                def fixed_rope_cos_sin(positions, head_dim, dtype):
                    cos_rows, sin_rows = [], []
                    for p in positions.tolist():
                        cos_row, sin_row = [], []
                        for i in range(head_dim // 2):
                            theta = 10000.0 ** (-2 * i / head_dim)  # recomputed
                            cos_row.append(math.cos(p * theta))
                            sin_row.append(math.sin(p * theta))
                        cos_rows.append(cos_row)
                        sin_rows.append(sin_row)
                    shape = (len(cos_rows), head_dim // 2)
                    cos = torch.tensor(cos_rows, dtype=torch.float64).reshape(shape)
                    sin = torch.tensor(sin_rows, dtype=torch.float64).reshape(shape)
                    return cos.to(dtype), sin.to(dtype)
            '''),
            "float64_tensor_loop": _src('''
                def fixed_rope_cos_sin(positions, head_dim, dtype):
                    n = positions.shape[0]
                    cos = torch.zeros(n, head_dim // 2, dtype=torch.float64)
                    sin = torch.zeros(n, head_dim // 2, dtype=torch.float64)
                    for s in range(n):
                        p = positions[s].double()
                        for i in range(head_dim // 2):
                            angle = p * 10000.0 ** (-2 * i / head_dim)
                            cos[s, i] = torch.cos(angle)
                            sin[s, i] = torch.sin(angle)
                    return cos.to(dtype), sin.to(dtype)
            '''),
        },
        "fixed_decode_position_ids": {
            "python_loops": _src('''
                def fixed_decode_position_ids(attention_mask, n_new):
                    batch, total = attention_mask.shape
                    out = torch.zeros(batch, n_new, dtype=torch.long)
                    for b in range(batch):
                        count = 0
                        for t in range(total):
                            if attention_mask[b, t]:
                                if t >= total - n_new:
                                    out[b, t - (total - n_new)] = count
                                count += 1
                    return out
            '''),
            "python_lists_recount": _src('''
                def fixed_decode_position_ids(attention_mask, n_new):
                    rows = attention_mask.tolist()
                    out = []
                    for row in rows:
                        total = len(row)
                        ids = []
                        for t in range(total - n_new, total):
                            # count the real tokens before t, again for every t
                            ids.append(sum(1 for s in row[:t] if s) if row[t] else 0)
                        out.append(ids)
                    return torch.tensor(out, dtype=torch.long).reshape(len(rows), n_new)
            '''),
        },
        "fixed_sliding_window_mask": {
            "python_loops": _src('''
                def fixed_sliding_window_mask(q_len, k_len, window):
                    mask = torch.zeros(q_len, k_len, dtype=torch.bool)
                    for i in range(q_len):
                        for j in range(k_len):
                            back = i + k_len - q_len - j
                            mask[i, j] = 0 <= back < window
                    return mask
            '''),
            "python_lists_then_tensor": _src('''
                def fixed_sliding_window_mask(q_len, k_len, window):
                    rows = []
                    for i in range(q_len):
                        query = i + (k_len - q_len)
                        rows.append([j <= query and query - j < window
                                     for j in range(k_len)])
                    return torch.tensor(rows, dtype=torch.bool).reshape(q_len, k_len)
            '''),
        },
    },
    "ex10_lab": {
        "log_distance_bias": {
            "triple_loop_recompute_slope": _src('''
                def log_distance_bias(n_heads, seq_len):
                    bias = torch.zeros(n_heads, seq_len, seq_len)
                    for h in range(n_heads):
                        for i in range(seq_len):
                            for j in range(seq_len):
                                slope = 2 ** (-8 * (h + 1) / n_heads)  # every entry
                                if j > i:
                                    bias[h, i, j] = float("-inf")
                                else:
                                    bias[h, i, j] = -slope * math.log(1 + i - j)
                    return bias
            '''),
            "python_lists_float64_then_cast": _src('''
                def log_distance_bias(n_heads, seq_len):
                    rows = []
                    for h in range(1, n_heads + 1):
                        m = 2.0 ** (-8.0 * h / n_heads)
                        rows.append([[(-m * math.log1p(i - j)) if j <= i
                                      else float("-inf") for j in range(seq_len)]
                                     for i in range(seq_len)])
                    out = torch.tensor(rows, dtype=torch.float64)
                    return out.reshape(n_heads, seq_len, seq_len).float()
            '''),
        },
        "retained_skill": {
            "rescan_summary_per_length": _src('''
                def retained_skill(summary, task, method, chance):
                    lengths = []
                    for r in summary:
                        if r["task"] == task and r["method"] == method:
                            if r["length"] not in lengths:
                                lengths.append(r["length"])
                    lengths.sort()
                    result = {}
                    for n in lengths:
                        # the rows are scanned again for every length, and so is L
                        base = [r["mean"] for r in summary if r["task"] == task
                                and r["method"] == method
                                and r["length"] == min(lengths)][0]
                        a = [r["mean"] for r in summary if r["task"] == task
                             and r["method"] == method and r["length"] == n][0]
                        if base <= chance:
                            result[n] = float("nan")
                        else:
                            result[n] = (a - chance) / (base - chance)
                    return result
            '''),
            "torch_float64_then_floats": _src('''
                def retained_skill(summary, task, method, chance):
                    mine = [r for r in summary
                            if r["task"] == task and r["method"] == method]
                    mine.sort(key=lambda r: r["length"])
                    acc = torch.tensor([r["mean"] for r in mine], dtype=torch.float64)
                    if acc[0] <= chance:
                        return {r["length"]: float("nan") for r in mine}
                    kept = (acc - chance) / (acc[0] - chance)
                    return {r["length"]: float(kept[i]) for i, r in enumerate(mine)}
            '''),
        },
    },
    "ex11_long_context": {
        "yarn_correction_range": {
            "torch_float64_scalars": _src('''
                def yarn_correction_range(beta_fast, beta_slow, head_dim, base,
                                          original_max_position, truncate=True):
                    def index(turns):
                        L = torch.tensor(float(original_max_position),
                                         dtype=torch.float64)
                        ratio = torch.log(L / (2 * math.pi * turns))
                        b = torch.log(torch.tensor(float(base), dtype=torch.float64))
                        return float(head_dim * ratio / (2 * b))

                    low, high = index(beta_fast), index(beta_slow)
                    if truncate:
                        low, high = math.floor(low), math.ceil(high)
                    low = low if low > 0 else 0
                    high = high if high < head_dim - 1 else head_dim - 1
                    return low, high
            '''),
            "log_of_each_factor": _src('''
                def yarn_correction_range(beta_fast, beta_slow, head_dim, base,
                                          original_max_position, truncate=True):
                    def index(turns):
                        num = (math.log(original_max_position) - math.log(2)
                               - math.log(math.pi) - math.log(turns))
                        return head_dim * num / (2 * math.log(base))

                    low = index(beta_fast)
                    high = index(beta_slow)
                    if truncate:
                        low = math.floor(low)
                        high = math.ceil(high)
                    return max(low, 0), min(high, head_dim - 1)
            '''),
        },
        "yarn_attention_factor": {
            "torch_float64_scalars": _src('''
                def yarn_attention_factor(factor, mscale=None, mscale_all_dim=None):
                    def root_inverse_t(m):
                        if factor <= 1:
                            return torch.tensor(1.0, dtype=torch.float64)
                        s = torch.tensor(float(factor), dtype=torch.float64)
                        return 0.1 * m * torch.log(s) + 1.0

                    if mscale and mscale_all_dim:
                        return float(root_inverse_t(mscale)
                                     / root_inverse_t(mscale_all_dim))
                    return float(root_inverse_t(1.0))
            '''),
            "branches_log10": _src('''
                def yarn_attention_factor(factor, mscale=None, mscale_all_dim=None):
                    if factor <= 1:
                        return 1.0
                    ln = math.log10(factor) / math.log10(math.e)
                    if mscale and mscale_all_dim:
                        return (0.1 * mscale * ln + 1.0) / (0.1 * mscale_all_dim * ln
                                                             + 1.0)
                    return 0.1 * ln + 1.0
            '''),
        },
        "llama3_scaled_frequencies": {
            "python_loop_per_frequency": _src('''
                def llama3_scaled_frequencies(inv_freq, factor, original_max_position,
                                              low_freq_factor=1.0,
                                              high_freq_factor=4.0):
                    out = []
                    L = original_max_position
                    for f in inv_freq.reshape(-1).tolist():
                        wavelength = 2 * math.pi / f
                        if wavelength < L / high_freq_factor:
                            out.append(f)
                        elif wavelength > L / low_freq_factor:
                            out.append(f / factor)
                        else:
                            mu = (L / wavelength - low_freq_factor) / (
                                high_freq_factor - low_freq_factor)
                            out.append((1 - mu) * f / factor + mu * f)
                    return torch.tensor(out, dtype=torch.float64).to(
                        inv_freq.dtype).reshape(inv_freq.shape)
            '''),
            "tensor_loop_recompute_bands": _src('''
                def llama3_scaled_frequencies(inv_freq, factor, original_max_position,
                                              low_freq_factor=1.0,
                                              high_freq_factor=4.0):
                    theta = inv_freq.double().reshape(-1)
                    out = torch.empty_like(theta)
                    for i in range(theta.numel()):
                        # the band edges are recomputed for every frequency
                        low_edge = original_max_position / high_freq_factor
                        high_edge = original_max_position / low_freq_factor
                        wavelength = 2 * math.pi / theta[i]
                        if wavelength < low_edge:
                            out[i] = theta[i]
                        elif wavelength > high_edge:
                            out[i] = theta[i] / factor
                        else:
                            mu = (original_max_position / wavelength
                                  - low_freq_factor) / (high_freq_factor
                                                        - low_freq_factor)
                            out[i] = (1 - mu) * theta[i] / factor + mu * theta[i]
                    return out.reshape(inv_freq.shape).to(inv_freq.dtype)
            '''),
        },
    },
}


def solution_notebook(assignment: str, root: Path = ROOT) -> Path:
    (nb,) = sorted((root / "solutions" / assignment).glob("*.ipynb"))
    return nb


def _cells(assignment: str, root: Path = ROOT) -> list[dict]:
    return json.loads(solution_notebook(assignment, root).read_text())["cells"]


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _grade_id(cell: dict) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def graded_functions(assignment: str, root: Path = ROOT) -> list[str]:
    """The functions of an assignment with an answer cell and a graded public test
    cell (``<name>__answer`` and ``<name>__public``), in notebook order."""
    ids = [_grade_id(c) for c in _cells(assignment, root)]
    return [
        gid.removesuffix("__answer")
        for gid in ids
        if gid and gid.endswith("__answer")
        and gid.removesuffix("__answer") + "__public" in ids
    ]


def answer_cells(assignment: str, root: Path = ROOT) -> dict[str, str]:
    """``{function: source of its answer cell}`` of the solution, in notebook order."""
    funcs = set(graded_functions(assignment, root))
    out = {}
    for cell in _cells(assignment, root):
        gid = _grade_id(cell)
        if gid and gid.endswith("__answer") and gid.removesuffix("__answer") in funcs:
            out[gid.removesuffix("__answer")] = _source(cell)
    return out


def graded_cells(assignment: str, function: str, root: Path = ROOT) -> list[str]:
    """The sources of ``<function>__public`` and ``<function>__hidden``."""
    by_id = {_grade_id(c): _source(c) for c in _cells(assignment, root)}
    return [by_id[f"{function}__{kind}"] for kind in ("public", "hidden")
            if f"{function}__{kind}" in by_id]


def rounds(assignment: str, root: Path = ROOT) -> int:
    """How many variant notebooks ``solution_cost --variants`` runs: the largest
    number of variants of one graded function of the assignment."""
    return max(len(VARIANTS[assignment][f]) for f in graded_functions(assignment, root))


def variant_of_round(assignment: str, function: str, k: int) -> str | None:
    """The name of the variant of ``function`` that round ``k`` puts in (None: the
    function has fewer variants, the solution's answer stays)."""
    names = list(VARIANTS[assignment][function])
    return names[k] if k < len(names) else None


def variant_answers(assignment: str, k: int, root: Path = ROOT) -> dict[str, str]:
    """The solution's answer cells with variant ``k`` of every function put in."""
    answers = answer_cells(assignment, root)
    for function in answers:
        name = variant_of_round(assignment, function, k)
        if name is not None:
            answers[function] = VARIANTS[assignment][function][name]
    return answers


PRELUDE = "import math\n\nimport torch\nimport torch.nn.functional as F\n"
"""What the notebooks' set-up cells import (ex07 imports ``F`` as well)."""


def run_in_process(assignment: str, function: str, variant: str | None,
                   root: Path = ROOT) -> dict:
    """Run the solution's answer cells, with ``variant`` of ``function`` in place of
    its answer (None: the solution's), then ``function``'s public and hidden test
    cells, in one namespace, as the grading kernel runs the notebook. A grader that
    fails raises (nbgrader then gives the cell 0 points); returns the namespace."""
    answers = answer_cells(assignment, root)
    if variant is not None:
        answers[function] = VARIANTS[assignment][function][variant]
    namespace: dict = {"__name__": "__main__"}
    exec(compile(PRELUDE, "<set-up>", "exec"), namespace)
    for name, src in answers.items():
        exec(compile(src, f"<{name}__answer>", "exec"), namespace)
    for src in graded_cells(assignment, function, root):
        exec(compile(src, f"<{function} test cell>", "exec"), namespace)
    return namespace
