"""A small Transformer encoder-decoder whose feed-forward blocks can be METAGROSS.

METAGROSS paper section 3.4 equips the Transformer (Vaswani et al., 2017; the Tensor2Tensor
small/base settings) with "a parallel non-autoregressive adaptation of METAGROSS" (section 2.3),
"the base models are all linear layers", max depth tuned in ``{1, 2, 3}``, beam 8/4 and length
penalty 0.6. The text says the METAGROSS layer replaces "the multi-head aggregation layer";
section 2.3 says the parallel variant "can be used in place of any position-wise feed-forward
layer", and that is where it goes here: ``ffn="metagross"`` puts a
:class:`~ctrlrnn.nn.metagross_ffn.MetagrossFFN` (``(..., d_model) -> (..., d_model)``) in place of
every ``Linear -> ReLU -> Linear`` block of the encoder and the decoder (``ffn="relu"``).

The rest is the standard model: sinusoidal positions added to embeddings scaled by
``sqrt(d_model)``, multi-head attention, residual connections with layer normalisation either
after each sub-layer (``norm="post"``, the original) or before it (``norm="pre"``, with a final
normalisation of each stack), dropout on every sub-layer output, and target embeddings tied to the
output projection (``tie_embeddings``).

Decoding uses the same incremental protocol as :class:`~ctrlrnn.models.seq2seq.Seq2Seq`
(``encode`` / ``init_state`` / ``step`` / ``_select``), so greedy decoding and the
length-normalised beam search of the QRNN paper eq 9 are shared with it. The decoder state is the
self-attention key/value cache of every layer; the cross-attention keys and values of the encoder
output are computed once per sentence.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.models.search import IncrementalDecoding
from ctrlrnn.nn.metagross_ffn import MetagrossFFN

FFNS = ("relu", "metagross")
NORMS = ("pre", "post")


def sinusoidal_positions(positions: Tensor, dim: int) -> Tensor:
    """``PE(pos, 2i) = sin(pos / 10000^(2i/d))``, ``PE(pos, 2i+1) = cos(...)``: ``(T, dim)``."""
    half = torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32)
    freq = torch.exp(-math.log(10000.0) * half / dim)
    angles = positions.to(torch.float32).unsqueeze(-1) * freq
    pe = torch.zeros(positions.shape[0], dim, device=positions.device)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : dim // 2])
    return pe


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over ``heads`` heads (Vaswani et al., section 3.2)."""

    def __init__(self, d_model: int, heads: int, dropout: float) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"heads: d_model={d_model} must be divisible by heads={heads}")
        self.heads = heads
        self.head_dim = d_model // heads
        self.q = nn.Linear(d_model, d_model)
        self.kv = nn.Linear(d_model, 2 * d_model)
        self.o = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def _split(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.heads, self.head_dim).transpose(1, 2)

    def keys_values(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values ``(B, heads, T, head_dim)`` of ``x`` ``(B, T, d_model)``."""
        k, v = self.kv(x).chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def attend(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """Queries from ``x`` ``(B, T, d)`` over ``k``, ``v``; ``mask`` True where allowed."""
        q = self._split(self.q(x))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0
        )
        B, _, T, _ = out.shape
        return self.o(out.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    """Position-wise ``Linear -> ReLU -> Linear`` (``"relu"``) or METAGROSS (section 2.3)."""

    def __init__(
        self, d_model: int, ffn_size: int, kind: str, depth: int, depth_gate: str,
        dropout: float,
    ) -> None:
        super().__init__()
        if kind not in FFNS:
            raise ValueError(f"ffn: expected one of {FFNS}, got {kind!r}")
        self.kind = kind
        if kind == "relu":
            self.net: nn.Module = nn.Sequential(
                nn.Linear(d_model, ffn_size), nn.ReLU(), nn.Dropout(dropout),
                nn.Linear(ffn_size, d_model),
            )
        else:
            # the block adds its own residual around the feed-forward layer, so the unit's
            # own residual (2.3-5) would count x twice (see MetagrossFFN's docstring)
            self.net = MetagrossFFN(d_model, depth, depth_gate=depth_gate, residual=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class _Sublayer(nn.Module):
    """Residual + layer norm around a sub-layer, pre- or post-norm."""

    def __init__(self, d_model: int, norm: str, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.pre = norm == "pre"
        self.drop = nn.Dropout(dropout)

    def inp(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre else x

    def out(self, x: Tensor, y: Tensor) -> Tensor:
        z = x + self.drop(y)
        return z if self.pre else self.norm(z)


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, ffn: FeedForward, norm: str,
                 dropout: float) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(d_model, heads, dropout)
        self.ffn = ffn
        self.s1 = _Sublayer(d_model, norm, dropout)
        self.s2 = _Sublayer(d_model, norm, dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        a = self.s1.inp(x)
        k, v = self.attn.keys_values(a)
        x = self.s1.out(x, self.attn.attend(a, k, v, mask))
        return self.s2.out(x, self.ffn(self.s2.inp(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, ffn: FeedForward, norm: str,
                 dropout: float) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, heads, dropout)
        self.ffn = ffn
        self.s1 = _Sublayer(d_model, norm, dropout)
        self.s2 = _Sublayer(d_model, norm, dropout)
        self.s3 = _Sublayer(d_model, norm, dropout)

    def forward(
        self, x: Tensor, cache: tuple[Tensor, Tensor] | None, self_mask: Tensor | None,
        cross_k: Tensor, cross_v: Tensor, cross_mask: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One layer; ``cache`` holds the self-attention keys/values of earlier positions.

        Returns the output and the self-attention keys and values up to this position.
        """
        a = self.s1.inp(x)
        k, v = self.self_attn.keys_values(a)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        x = self.s1.out(x, self.self_attn.attend(a, k, v, self_mask))
        x = self.s2.out(x, self.cross_attn.attend(self.s2.inp(x), cross_k, cross_v, cross_mask))
        return self.s3.out(x, self.ffn(self.s3.inp(x))), k, v


class TransformerSeq2Seq(IncrementalDecoding, nn.Module):
    """Transformer encoder-decoder (see the module docstring).

    Args:
        src_vocab, tgt_vocab: vocabulary sizes.
        d_model, heads, layers: model width, attention heads, layers of each stack.
        ffn_size: inner width of the ReLU feed-forward blocks (default ``4 * d_model``).
        ffn: ``"relu"`` or ``"metagross"`` (METAGROSS paper 2.3 / 3.4).
        ffn_depth, ffn_depth_gate: METAGROSS maximum depth (``{1, 2, 3}`` in the paper) and its
            depth gate (``"token"`` or ``"scalar"``).
        norm: ``"post"`` (Vaswani et al.) or ``"pre"`` layer normalisation.
        dropout: on embeddings, attention weights and sub-layer outputs.
        tie_embeddings: share the target embedding with the output projection.
        pad_id, bos_id, eos_id: special token ids (shared by both vocabularies).
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        *,
        d_model: int = 128,
        heads: int = 4,
        layers: int = 2,
        ffn_size: int | None = None,
        ffn: str = "relu",
        ffn_depth: int = 2,
        ffn_depth_gate: str = "token",
        norm: str = "pre",
        dropout: float = 0.1,
        tie_embeddings: bool = True,
        pad_id: int = 0,
        bos_id: int = 2,
        eos_id: int = 3,
    ) -> None:
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"norm: expected one of {NORMS}, got {norm!r}")
        if ffn not in FFNS:
            raise ValueError(f"ffn: expected one of {FFNS}, got {ffn!r}")
        if layers < 1:
            raise ValueError(f"layers: expected a positive integer, got {layers}")
        self.d_model, self.heads, self.layers, self.norm_kind = d_model, heads, layers, norm
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        inner = ffn_size or 4 * d_model

        def make_ffn() -> FeedForward:
            return FeedForward(d_model, inner, ffn, ffn_depth, ffn_depth_gate, dropout)

        self.src_embed = nn.Embedding(src_vocab, d_model, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model, padding_idx=pad_id)
        nn.init.normal_(self.src_embed.weight, std=d_model**-0.5)
        nn.init.normal_(self.tgt_embed.weight, std=d_model**-0.5)
        with torch.no_grad():
            self.src_embed.weight[pad_id].zero_()
            self.tgt_embed.weight[pad_id].zero_()
        self.enc_layers = nn.ModuleList(
            EncoderLayer(d_model, heads, make_ffn(), norm, dropout) for _ in range(layers)
        )
        self.dec_layers = nn.ModuleList(
            DecoderLayer(d_model, heads, make_ffn(), norm, dropout) for _ in range(layers)
        )
        self.enc_norm = nn.LayerNorm(d_model) if norm == "pre" else nn.Identity()
        self.dec_norm = nn.LayerNorm(d_model) if norm == "pre" else nn.Identity()
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(d_model, tgt_vocab)
        if tie_embeddings:
            self.out.weight = self.tgt_embed.weight

    # ------------------------------------------------------------------ pieces
    def _embed(self, table: nn.Embedding, tokens: Tensor, offset: int = 0) -> Tensor:
        pos = torch.arange(offset, offset + tokens.shape[1], device=tokens.device)
        x = table(tokens) * math.sqrt(self.d_model) + sinusoidal_positions(pos, self.d_model)
        return self.drop(x)

    def encode(self, src: Tensor, src_lengths: Tensor) -> dict[str, Tensor]:
        """Encoder output and, per decoder layer, the cross-attention keys and values."""
        lengths = src_lengths.to(src.device)
        mask = torch.arange(src.shape[1], device=src.device)[None] < lengths[:, None]
        attn_mask = mask[:, None, None, :]  # (B, 1, 1, S): keys that exist
        x = self._embed(self.src_embed, src)
        for layer in self.enc_layers:
            x = layer(x, attn_mask)
        memory = self.enc_norm(x)
        enc = {"memory": memory, "mask": mask, "lengths": src_lengths}
        for i, layer in enumerate(self.dec_layers):
            enc[f"k{i}"], enc[f"v{i}"] = layer.cross_attn.keys_values(memory)
        return enc

    def _decode(
        self, y: Tensor, enc: dict[str, Tensor], caches: list[Tensor] | None
    ) -> tuple[Tensor, list[Tensor]]:
        """Decoder over target embeddings ``y``; with ``caches`` the self-attention keys and
        values of earlier positions are prepended (incremental decoding)."""
        T = y.shape[1]
        if caches is None:
            causal: Tensor | None = torch.ones(T, T, dtype=torch.bool, device=y.device).tril()
        else:
            causal = None  # one new position attends to every cached one
        cross_mask = enc["mask"][:, None, None, :]
        new: list[Tensor] = []
        x = y
        for i, layer in enumerate(self.dec_layers):
            cache = None if caches is None else (caches[2 * i], caches[2 * i + 1])
            x, k, v = layer(x, cache, causal, enc[f"k{i}"], enc[f"v{i}"], cross_mask)
            new += [k, v]
        return self.dec_norm(x), new

    # ------------------------------------------------------------------ teacher forcing
    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor,
                positions: Tensor | None = None) -> Tensor:
        """Logits ``(B, T_tgt, V)`` for the target prefix ``tgt_in`` (teacher forcing); with a
        bool mask ``positions`` ``(B, T_tgt)``, ``(N, V)`` at its ``N`` true entries only (the
        output layer skips the padding)."""
        enc = self.encode(src, src_lengths)
        h, _ = self._decode(self._embed(self.tgt_embed, tgt_in), enc, None)
        return self.out(h if positions is None else h[positions])

    # ------------------------------------------------------------------ incremental decoding
    def init_state(self, enc: dict[str, Tensor]) -> list[Tensor]:
        """Empty self-attention caches ``(B, heads, 0, head_dim)`` (keys, values per layer)."""
        B = enc["memory"].shape[0]
        empty = enc["memory"].new_zeros(B, self.heads, 0, self.d_model // self.heads)
        return [empty for _ in range(2 * self.layers)]

    def step(
        self, token: Tensor, state: list[Tensor], enc: dict[str, Tensor]
    ) -> tuple[Tensor, list[Tensor]]:
        """Log-probabilities ``(B, V)`` of the next token after ``token`` ``(B,)``."""
        offset = state[0].shape[2]
        y = self._embed(self.tgt_embed, token.unsqueeze(1), offset)
        h, new = self._decode(y, enc, state)
        return F.log_softmax(self.out(h[:, 0]), -1), new

    def _select(self, state: list[Tensor], index: Tensor) -> list[Tensor]:
        return [s.index_select(0, index) for s in state]

