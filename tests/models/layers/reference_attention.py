"""The direct masked softmax over dates, per pixel: the reference the factorised attention is tested against.

Memory ``B*h*Q*T*H*W``: for tests only.
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor

from mtan_s1s2.models.layers.attention import MultiTimeAttention


def reference_multi_time_attention(
    attn: MultiTimeAttention, values: Tensor, mask: Tensor, ref_emb: Tensor, time_emb: Tensor
) -> Tensor:
    """Direct masked softmax over dates per pixel.

    Memory ``B*h*Q*T*H*W``: for tests only.

    Same arguments and output ``out`` as :meth:`MultiTimeAttention.forward`.
    """
    B, T, d, H, W = values.shape
    s = attn.scores(ref_emb, time_emb)  # (B, h, Q, T)
    s = s[..., None, None].expand(*s.shape, H, W)  # (B, h, Q, T, H, W)
    valid = mask[:, None, None]  # (B, 1, 1, T, H, W)
    s = s.masked_fill(~valid, float("-inf"))
    p = torch.softmax(s, dim=3).nan_to_num(0.0)  # all-masked pixels: 0
    v = torch.where(mask[:, :, None], values, torch.zeros_like(values)).double()
    out = torch.einsum("bnqthw,btdhw->bqndhw", p.double(), v)
    return rearrange(out, "b q n d h w -> b q (n d) h w").float()
