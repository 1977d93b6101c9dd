"""``profuse study rmsnorm``: the RMSNorm case study on whatever device is present."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import UserError
from ._common import console

# raw text (not re-wrapped), each example's comment on the line below it: every line fits 80 columns
HELP = """examples:
  profuse study rmsnorm
      CPU, default size (about a minute)
  profuse study rmsnorm --device cuda --shape 8,2048,4096 --dtype bfloat16
  profuse study rmsnorm --format json > rmsnorm.json
  profuse study llama
      tiny Llama, RMSNorm found, fixed, verified
  profuse study llama --size small --all-patterns
      every candidate the advisor finds
  profuse study llama --size small --threads 1
      measured on one thread (a busy, shared CPU)
"""


def add_parser(subs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``profuse study``."""
    p = subs.add_parser("study", help="case studies: rmsnorm (op by op vs fused vs compiled)", epilog=HELP,
                        description="Record, compare and explain variants of a model piece.",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=("rmsnorm", "llama"))
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, emu (profuse's emulated PrivateUse1 device), ... "
                   "(default: cuda if present, else cpu)")
    p.add_argument("--shape", default="4,256,2048", help="B,S,H (default 4,256,2048)")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16", "float64"))
    p.add_argument("--iters", type=int, default=20, help="profiled calls per variant (default 20)")
    p.add_argument("--out", default=None, help="folder for the bundles and study.json (default: profuse-out/NAME)")
    p.add_argument("--size", choices=("tiny", "small"), default="tiny", help="llama: model size (default tiny)")
    p.add_argument("--steps", type=int, default=6, help="llama: profiled steps per measurement (default 6)")
    p.add_argument("--all-patterns", action="store_true",
                   help="llama: verify every candidate, not only RMSNorm (slower: compiles more modules)")
    p.add_argument("--threads", type=int, default=None,
                   help="llama: torch intra-op threads while measuring (default: torch's own); 1 on a CPU "
                        "shared with other work, where parallel regions wait for descheduled threads")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def _shape(text: str) -> tuple[int, int, int]:
    try:
        dims = tuple(int(v) for v in text.split(","))
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) <= 0:
        raise UserError(f"--shape: expected three positive sizes B,S,H (got {text!r})")
    return dims[0], dims[1], dims[2]


def run(args: argparse.Namespace) -> int:
    """Run the chosen case study (rmsnorm or llama) and print or write its result."""
    shape = _shape(args.shape)
    if args.iters < 1:
        raise UserError("--iters must be at least 1")
    try:
        import torch
    except ImportError:
        raise UserError("profuse study needs torch: pip install 'profuse[capture]'") from None
    from ..report.study import print_study
    from ..studies.rmsnorm import run_study

    out = args.out or f"profuse-out/{args.name}"
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.split(":")[0] == "emu":
        from ..capture.config import load_emu

        load_emu()  # registers the device with torch; a UserError if it is not built
    _check_device(torch, device)
    if args.name == "llama":
        return _llama(args, out, device)
    err = console() if args.format == "table" else None
    status = err.status("RMSNorm study") if err else None
    if status:
        status.start()
    try:
        result = run_study(device=device, shape=shape, dtype=args.dtype, iters=args.iters, out=out,
                           progress=(lambda n: status.update(f"RMSNorm study: profiling {n}")) if status else None)
    except ValueError as e:
        raise UserError(str(e)) from None
    finally:
        if status:
            status.stop()
    if args.format == "json":
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        print_study(console(), result)
    return 0


def _check_device(torch: Any, device: str) -> None:
    """A one-line error for a device torch cannot use here (an unknown name, CUDA on a CPU build)."""
    try:
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(f"--device {device}: not usable here ({first})") from None


def _llama(args: argparse.Namespace, out: str, device: str) -> int:
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be at least 1 (got {args.threads})")
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise UserError("profuse study llama needs transformers: pip install transformers") from None
    from .._io import atomic_write
    from ..report.study import print_llama
    from ..studies.llama import run_llama_study

    con = console()
    status = con.status("Llama study: profiling, fixing and verifying") if args.format == "table" else None
    if status:
        status.start()
    try:
        result = run_llama_study(size=args.size, steps=args.steps, out=out, all_patterns=args.all_patterns,
                                 threads=args.threads, device=device)
    finally:
        if status:
            status.stop()
    doc = result.to_json()
    atomic_write(f"{out}/study.json", json.dumps(doc, indent=2))
    if args.format == "json":
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        print_llama(con, result)
    return 0
