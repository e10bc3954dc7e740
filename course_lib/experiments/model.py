"""A tiny causal transformer whose position method is a parameter.

Everything but the position method is shared, so differences between runs come from
how positions enter the model. Each method is the library's implementation:

============  ===========================================================  ==========
method        where positions enter (library function or module)          paper
============  ===========================================================  ==========
none          nowhere: only the causal mask orders the tokens (NoPE)       Kazemnejad
learned       trainable table added to the embeddings                      BERT/GPT-2
              (:class:`~course_lib.sinusoidal.LearnedPositionalEncoding`)
sinusoidal    fixed sinusoids added to the embeddings                      Vaswani
              (:class:`~course_lib.sinusoidal.SinusoidalPositionalEncoding`)
rope          queries and keys rotated (:class:`~course_lib.rope.RotaryEmbedding`) Su
alibi         bias ``-m_h (i - j)`` (:func:`~course_lib.alibi.alibi_bias`)  Press
t5            learned bias per distance bucket                             Raffel
              (:class:`~course_lib.relative.T5RelativeBias`, causal buckets)
shaw          relative key/value vectors clipped at ``K``                  Shaw
              (:func:`~course_lib.relative.shaw_relative_attention`)
xl            Transformer-XL's four-term scores with sinusoids of the      Dai
              distance (:func:`~course_lib.transformer_xl.rel_attention_scores`)
da            ReLU scores rescaled by a learned function of the distance   Wu
              (:func:`~course_lib.da.da_attention`)
custom        an additive bias from a function you pass (``bias_fn``),     exercise
              as ALiBi: ``bias_fn(n_heads, seq) -> (n_heads, seq, seq)``
============  ===========================================================  ==========

Choices that matter past the training length ``L`` (the model's ``train_length``):

* ``learned``: the table has ``L`` rows. Positions ``>= L`` are **clamped** to the last
  row ``L - 1`` (the model still runs; every later token gets the same position).
* ``t5``: ``num_buckets = max_distance = L`` causal buckets. By T5's rule the first
  ``L // 2`` buckets are exact (one distance each) and the other half spread the
  distances ``L // 2 .. L - 1`` logarithmically, so only distances below ``L / 2`` are
  guaranteed a bucket of their own; above, a bucket may hold several distances or
  none: at ``L = 32`` distances 0 to 26, 29 and 30 still have one each, bucket 20 is
  never used and distances 27 and 28 share bucket 28. Every distance from ``L - 1``
  on falls in the last bucket, which is trained (distance ``L - 1`` occurs in
  training); longer distances share it, as in T5.
* ``shaw``: relative vectors clipped at ``K = L // 2``; longer distances share the
  clipped vector (trained), as in Shaw et al.
* ``xl``: no ``clamp_len``: distances beyond ``L - 1`` get sinusoids never seen in
  training, as in the authors' default.
* ``rope``, ``sinusoidal``: formulas, defined at every position; ``alibi`` and ``da``
  are functions of the distance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .._validate import describe, fail, require_positive_int
from ..alibi import alibi_bias
from ..attention import causal_mask, scaled_dot_product_attention
from ..da import da_attention
from ..relative import T5RelativeBias, shaw_relative_attention
from ..rope import RotaryEmbedding
from ..sinusoidal import LearnedPositionalEncoding, SinusoidalPositionalEncoding
from ..transformer_xl import rel_attention_scores, relative_sinusoidal_embedding

__all__ = [
    "CUSTOM",
    "METHODS",
    "METHOD_LABELS",
    "ModelConfig",
    "TinyTransformer",
    "count_parameters",
]

METHODS: tuple[str, ...] = (
    "none", "learned", "sinusoidal", "rope", "alibi", "t5", "shaw", "xl", "da"
)
"""Position methods, in the order tables and plots list them."""

CUSTOM = "custom"
"""The method name of a model whose attention bias comes from a user function."""

METHOD_LABELS: dict[str, str] = {
    "none": "NoPE",
    "learned": "learned abs.",
    "sinusoidal": "sinusoidal",
    "rope": "RoPE",
    "alibi": "ALiBi",
    "t5": "T5 bias",
    "shaw": "Shaw rel.",
    "xl": "Transformer-XL",
    "da": "DA-Transformer",
}
"""Display names of the methods."""


@dataclass(frozen=True)
class ModelConfig:
    """Size and position method of a :class:`TinyTransformer`.

    Attributes:
        vocab_size: number of input tokens.
        n_classes: outputs per position.
        method: one of ``METHODS``, or ``CUSTOM`` (with a ``bias_fn``).
        train_length: ``L``, the training length (size of the learned table, T5
            buckets, Shaw clipping ``L // 2``).
        d_model: width.
        n_heads: attention heads.
        n_layers: transformer blocks.
        d_ff: hidden width of the feed-forward layers.
    """

    vocab_size: int
    n_classes: int
    method: str
    train_length: int = 16
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 2
    d_ff: int = 128

    def __post_init__(self) -> None:
        fn = "ModelConfig"
        for name in ("vocab_size", "n_classes", "d_model", "n_heads", "n_layers",
                     "d_ff"):
            require_positive_int(fn, name, getattr(self, name))
        if self.method not in (*METHODS, CUSTOM):
            fail(fn, f"method must be one of {', '.join(METHODS)} or {CUSTOM!r}, "
                     f"got {self.method!r}")
        if self.train_length < 4:
            fail(fn, f"train_length must be at least 4, got {self.train_length}")
        head_dim, rest = divmod(self.d_model, self.n_heads)
        if rest or head_dim % 2:
            fail(fn, f"d_model must be n_heads times an even head_dim, got "
                     f"d_model={self.d_model} and n_heads={self.n_heads}")


class PositionalSelfAttention(nn.Module):
    """Causal multi-head self-attention with the position method of ``config``.

    Shared modules (the T5 bias table, the rotary cache) are passed in, so that all
    layers use one, as in T5 and RoFormer.
    """

    def __init__(self, config: ModelConfig, shared: nn.ModuleDict,
                 bias_fn: Callable[[int, int], torch.Tensor] | None = None) -> None:
        super().__init__()
        self.method = config.method
        self.bias_fn = bias_fn
        self.n_heads = config.n_heads
        self.head_dim = config.d_model // config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)
        # shared modules are registered once, in the model, not in every layer
        object.__setattr__(self, "shared", shared)
        if self.method == "shaw":
            self.max_distance = config.train_length // 2
            rows = 2 * self.max_distance + 1
            scale = self.head_dim**-0.5
            self.a_k = nn.Parameter(torch.randn(rows, self.head_dim) * scale)
            self.a_v = nn.Parameter(torch.randn(rows, self.head_dim) * scale)
        elif self.method == "xl":
            self.r_proj = nn.Linear(config.d_model, config.d_model, bias=False)
            self.u = nn.Parameter(torch.randn(self.n_heads, self.head_dim) * 0.02)
            self.v = nn.Parameter(torch.randn(self.n_heads, self.head_dim) * 0.02)
        elif self.method == "da":
            self.w = nn.Parameter(torch.zeros(self.n_heads))
            self.v_bias = nn.Parameter(torch.zeros(self.n_heads))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x (batch, seq, d_model)`` -> ``(batch, seq, d_model)``."""
        batch, seq, width = x.shape
        qkv = self.qkv(x).view(batch, seq, 3, self.n_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 x (B, H, S, D)
        mask = causal_mask(seq, seq).to(x.device)  # (S, S)
        m = self.method
        if m in ("none", "learned", "sinusoidal"):
            z, _ = scaled_dot_product_attention(q, k, v, mask=mask)
        elif m == "rope":
            rope = self.shared["rope"]
            z, _ = scaled_dot_product_attention(rope(q), rope(k), v, mask=mask)
        elif m == "alibi":
            bias = alibi_bias(self.n_heads, seq, causal=True).to(x)  # (H, S, S)
            z, _ = scaled_dot_product_attention(q, k, v, bias=bias)
        elif m == "t5":
            bias = self.shared["t5"](seq)  # (H, S, S)
            z, _ = scaled_dot_product_attention(q, k, v, bias=bias, mask=mask)
        elif m == CUSTOM:
            bias = self.bias_fn(self.n_heads, seq)
            if not isinstance(bias, torch.Tensor) or bias.shape != (
                self.n_heads, seq, seq
            ):
                fail("TinyTransformer", f"bias_fn({self.n_heads}, {seq}) must return "
                     f"a tensor of shape ({self.n_heads}, {seq}, {seq}), got "
                     f"{describe(bias)}")
            z, _ = scaled_dot_product_attention(q, k, v, bias=bias.to(q), mask=mask)
        elif m == "shaw":
            z, _ = shaw_relative_attention(
                q, k, v, self.a_k, self.a_v, self.max_distance, mask=mask
            )
        elif m == "xl":
            pos = relative_sinusoidal_embedding(seq, width, dtype=x.dtype).to(x.device)
            r = self.r_proj(pos).view(seq, self.n_heads, self.head_dim)  # (S, H, D)
            scores = rel_attention_scores(q, k, r.transpose(0, 1), self.u, self.v)
            z = scores.softmax(dim=-1) @ v  # (B, H, S, D)
        else:  # da
            z, _ = da_attention(q, k, v, self.w, self.v_bias, causal=True)
        z = z.transpose(1, 2).reshape(batch, seq, width)  # (B, S, d_model)
        return self.out(z)


class _Block(nn.Module):
    """Pre-LayerNorm block: ``x + attn(LN(x))``, then ``x + FF(LN(x))``."""

    def __init__(self, config: ModelConfig, shared: nn.ModuleDict,
                 bias_fn: Callable[[int, int], torch.Tensor] | None) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attn = PositionalSelfAttention(config, shared, bias_fn)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.ff = nn.Sequential(
            nn.Linear(config.d_model, config.d_ff),
            nn.GELU(),
            nn.Linear(config.d_ff, config.d_model),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.ff(self.ln2(x))


class TinyTransformer(nn.Module):
    """A small causal transformer classifying every position.

    .. math::

        h^{(0)}_p = E[x_p] + \\mathrm{PE}_p, \\quad
        h^{(\\ell)} = \\mathrm{Block}_\\ell(h^{(\\ell-1)}), \\quad
        \\mathrm{logits}_p = W\\, \\mathrm{LN}(h^{(n)}_p)

    with :math:`\\mathrm{PE}_p` only for ``learned`` and ``sinusoidal``; every other
    method acts inside the attention (see the module docstring). Initialise under
    ``torch.manual_seed`` (or :func:`torch.random.fork_rng`) for reproducible weights.

    Args:
        config: a :class:`ModelConfig`.
        bias_fn: only with ``method="custom"``: ``bias_fn(n_heads, seq)`` returns an
            additive bias ``(n_heads, seq, seq)`` (query ``i``, key ``j``), added to
            the scaled scores of every layer; the model applies the causal mask.

    Shapes: ``forward(tokens)`` takes ``(batch, seq)`` long tokens, any ``seq >= 1``,
    and returns logits ``(batch, seq, n_classes)``.

    Example:
        >>> cfg = ModelConfig(vocab_size=10, n_classes=3, method="alibi",
        ...                   train_length=8)
        >>> TinyTransformer(cfg)(torch.zeros(2, 64, dtype=torch.long)).shape
        torch.Size([2, 64, 3])
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        bias_fn: Callable[[int, int], torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        if (config.method == CUSTOM) != (bias_fn is not None):
            fail("TinyTransformer", f"bias_fn must be given exactly when method is "
                 f"{CUSTOM!r}, got method={config.method!r} and bias_fn={bias_fn!r}")
        self.config = config
        d = config.d_model
        self.embed = nn.Embedding(config.vocab_size, d)
        self.shared = nn.ModuleDict()
        if config.method == "learned":
            self.position = LearnedPositionalEncoding(config.train_length, d,
                                                      init_std=1.0)
        elif config.method == "sinusoidal":
            self.position = SinusoidalPositionalEncoding(d, config.train_length)
        else:
            self.position = None
        if config.method == "rope":
            self.shared["rope"] = RotaryEmbedding(d // config.n_heads,
                                                  max_seq_len=config.train_length)
        elif config.method == "t5":
            self.shared["t5"] = T5RelativeBias(
                config.n_heads,
                num_buckets=config.train_length,
                max_distance=config.train_length,
                bidirectional=False,
            )
        self.blocks = nn.ModuleList(
            [_Block(config, self.shared, bias_fn) for _ in range(config.n_layers)]
        )
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, config.n_classes)

    def position_ids(self, seq: int) -> torch.Tensor:
        """Rows of the position table used at positions ``0 .. seq-1``.

        ``arange(seq)``, clamped to ``train_length - 1`` for the learned table.

        >>> cfg = ModelConfig(vocab_size=4, n_classes=2, method="learned",
        ...                   train_length=4)
        >>> TinyTransformer(cfg).position_ids(6).tolist()
        [0, 1, 2, 3, 3, 3]
        """
        ids = torch.arange(seq)  # (seq,)
        if self.config.method == "learned":
            ids = ids.clamp(max=self.config.train_length - 1)
        return ids

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Input of the first block: ``(batch, seq)`` -> ``(batch, seq, d_model)``."""
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or (
            tokens.is_floating_point()
        ):
            fail("TinyTransformer", "tokens must be a (batch, seq) integer tensor, "
                 f"got {describe(tokens)}", TypeError)
        if tokens.numel() and (int(tokens.min()) < 0
                               or int(tokens.max()) >= self.config.vocab_size):
            fail("TinyTransformer", f"tokens must lie in 0..{self.config.vocab_size-1}"
                 f", got values from {int(tokens.min())} to {int(tokens.max())}")
        x = self.embed(tokens)  # (B, S, d_model)
        if self.position is not None:
            ids = self.position_ids(tokens.shape[1]).to(tokens.device)
            x = self.position(x, ids)  # (B, S, d_model)
        return x

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, seq, n_classes)`` for tokens ``(batch, seq)``."""
        x = self.embed_tokens(tokens)  # (B, S, d_model)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))  # (B, S, n_classes)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)

