"""Naive implementations of the patterns the advisor names: what a model file might contain."""
import math, torch
from torch import nn

class NaiveRMSNorm(nn.Module):
    def __init__(s, h): super().__init__(); s.weight = nn.Parameter(torch.ones(h)); s.eps = 1e-6
    def forward(s, x):
        return s.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s.eps))
class NaiveLayerNorm(nn.Module):
    def __init__(s, h): super().__init__(); s.weight = nn.Parameter(torch.ones(h)); s.bias = nn.Parameter(torch.zeros(h))
    def forward(s, x):
        mu = x.mean(-1, keepdim=True); var = (x - mu).pow(2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * s.weight + s.bias
class NaiveSoftmax(nn.Module):
    def forward(s, x):
        e = torch.exp(x - x.amax(-1, keepdim=True)); return e / e.sum(-1, keepdim=True)
class NaiveGeluTanh(nn.Module):
    def forward(s, x): return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))
class NaiveGeluErf(nn.Module):
    def forward(s, x): return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
class NaiveSwiGLU(nn.Module):
    def __init__(s, h): super().__init__(); s.gate = nn.Linear(h, 2*h, bias=False); s.up = nn.Linear(h, 2*h, bias=False)
    def forward(s, x): return torch.nn.functional.silu(s.gate(x)) * s.up(x)
class NaiveRotary(nn.Module):
    def forward(s, q, cos, sin):
        h = q.shape[-1] // 2
        rot = torch.cat((-q[..., h:], q[..., :h]), dim=-1)
        return q * cos + rot * sin
class NaiveBiasAct(nn.Module):
    def __init__(s, h): super().__init__(); s.w = nn.Parameter(torch.randn(h, h)); s.b = nn.Parameter(torch.zeros(h))
    def forward(s, x): return torch.relu(x @ s.w + s.b)
class NaiveResidualNorm(nn.Module):
    def __init__(s, h): super().__init__(); s.norm = nn.LayerNorm(h)
    def forward(s, x, res): return s.norm(x + res)
class NaiveAttention(nn.Module):
    def forward(s, q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v
