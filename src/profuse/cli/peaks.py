"""``profuse peaks``: measure and cache the device's copy bandwidth and matmul rate."""
from __future__ import annotations

import argparse
import json

from ..errors import UserError


def add_parser(subs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``profuse peaks``."""
    p = subs.add_parser("peaks", help="measure copy bandwidth and matmul rate of a device (cached)",
                        epilog="examples:\n  profuse peaks\n  profuse peaks --device cuda --refresh",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--refresh", action="store_true",
                   help="measure again instead of using the cache (which keeps the highest figure seen)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Measure (or read the cached) copy bandwidth and matmul rate of a device; needs torch."""
    try:
        from ..capture.peaks import cached_peaks, peaks
    except ImportError:
        raise UserError("profuse peaks needs torch: pip install 'profuse[capture]'") from None
    try:
        was_cached = not args.refresh and cached_peaks(args.device) is not None
        result = peaks(args.device, refresh=args.refresh)
    except (RuntimeError, ValueError) as e:
        raise UserError(f"--device {args.device}: {str(e).splitlines()[0]}") from None
    import msgspec

    print(json.dumps(dict(msgspec.to_builtins(result), cached=was_cached), indent=2))
    return 0
