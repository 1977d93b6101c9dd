"""Naive implementations of the patterns the advisor names: what a model file might contain."""
import math

import torch
from torch import nn


class NaiveRMSNorm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = 1e-6

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class NaiveLayerNorm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.bias = nn.Parameter(torch.zeros(h))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = (x - mu).pow(2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * self.weight + self.bias


class NaiveSoftmax(nn.Module):
    def forward(self, x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)


class NaiveGeluTanh(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


class NaiveGeluErf(nn.Module):
    def forward(self, x):
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class NaiveSwiGLU(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.gate = nn.Linear(h, 2 * h, bias=False)
        self.up = nn.Linear(h, 2 * h, bias=False)

    def forward(self, x):
        return torch.nn.functional.silu(self.gate(x)) * self.up(x)


class NaiveRotary(nn.Module):
    def forward(self, q, cos, sin):
        h = q.shape[-1] // 2
        rot = torch.cat((-q[..., h:], q[..., :h]), dim=-1)
        return q * cos + rot * sin


class NaiveBiasAct(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.w = nn.Parameter(torch.randn(h, h))
        self.b = nn.Parameter(torch.zeros(h))

    def forward(self, x):
        return torch.relu(x @ self.w + self.b)


class NaiveResidualNorm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.norm = nn.LayerNorm(h)

    def forward(self, x, res):
        return self.norm(x + res)


class NaiveAttention(nn.Module):
    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


class NaiveQuickGELU(nn.Module):
    """CLIP's QuickGELU: one input, scaled by a constant before the sigmoid."""

    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class NaiveSiLU(nn.Module):
    """SiLU written out: one input, no scale."""

    def forward(self, x):
        return x * torch.sigmoid(x)


class NaiveSigmoidSwiGLU(nn.Module):
    """A gated unit with the SiLU written out: silu(gate) * up, two inputs."""

    def __init__(self, h):
        super().__init__()
        self.proj = nn.Linear(h, 4 * h, bias=False)

    def forward(self, x):
        gate, up = self.proj(x).chunk(2, dim=-1)
        return gate * torch.sigmoid(gate) * up


class NaiveAttentionDropout(nn.Module):
    """Attention with an nn.Dropout module between softmax and the second matmul (eval: no work)."""

    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)

    def forward(self, q, k, v):
        p = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        return self.drop(p) @ v
