"""A small BERT inference loop, the workload behind the recorded CUDA fixtures (tests/fixtures/h200).

Random weights (nothing downloads). Each step is what a serving loop does: token ids made on the host,
copied to the device, the forward, and the pooled output copied back (a blocking copy). Modes:

  eager    the model as written (launch-bound on a fast GPU at this size)
  graph    the forward captured once in a torch.cuda.CUDAGraph and replayed
  compile  torch.compile (inductor)
  reduce-overhead  torch.compile(mode="reduce-overhead"): inductor kernels replayed in CUDA graphs

Run under profuse: profuse run --out DIR -- python tools/cuda_fixtures/bert_infer.py --mode graph
"""
from __future__ import annotations

import argparse

import torch
from transformers import BertConfig, BertModel


class Step(torch.nn.Module):
    """One serving step: host ids -> device -> model -> pooled output on the host."""

    def __init__(self, model: torch.nn.Module, mode: str, device: str, batch: int, seq: int) -> None:
        super().__init__()
        self.model = model
        self.mode = mode
        self.device = device
        self.batch, self.seq = batch, seq
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_ids: torch.Tensor | None = None
        self.static_out: torch.Tensor | None = None

    def _capture(self, ids: torch.Tensor) -> None:
        # the first call captures (it is the warm-up step, not recorded)
        self.static_ids = ids.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.model(self.static_ids)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_out = self.model(self.static_ids).pooler_output

    def forward(self, host_ids: torch.Tensor) -> torch.Tensor:
        ids = host_ids.to(self.device)
        if self.mode == "graph":
            if self.graph is None:
                self._capture(ids)
            assert self.static_ids is not None and self.graph is not None and self.static_out is not None
            self.static_ids.copy_(ids)
            self.graph.replay()
            out = self.static_out
        else:
            out = self.model(ids).pooler_output
        return out.float().cpu()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["eager", "graph", "compile", "reduce-overhead"], default="eager")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--calls", type=int, default=6)
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=256, num_hidden_layers=args.layers, num_attention_heads=4, intermediate_size=1024,
                     vocab_size=30522, max_position_embeddings=512)
    model = BertModel(cfg).eval().to(args.device)
    if args.mode == "compile":
        model = torch.compile(model)
    elif args.mode == "reduce-overhead":
        model = torch.compile(model, mode="reduce-overhead")
    step = Step(model, args.mode, args.device, args.batch, args.seq)
    gen = torch.Generator().manual_seed(1)
    with torch.inference_mode() if args.mode != "graph" else torch.no_grad():
        for _ in range(args.calls):
            host_ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), generator=gen)
            out = step(host_ids)
    print(f"{args.mode}: {args.calls} calls, output {tuple(out.shape)} sum {out.sum().item():.4f}")


if __name__ == "__main__":
    main()
