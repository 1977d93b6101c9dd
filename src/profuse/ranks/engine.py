"""Executors for the map step: a local process pool, or Ray tasks. Both run :func:`map_rank`."""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

import msgspec

from ..errors import UserError
from .maptask import MapResult, MapTask, map_rank

ENGINES = ("local", "ray")
# A rank's load holds its decoded columns and DuckDB tables at once: a few times its JSON size.
BYTES_PER_RAW_BYTE = 4
MIN_TASK_BYTES = 256 << 20
RAY_OBJECT_STORE = 200 << 20  # a local Ray instance carries only the small records the map returns

Done = Callable[[MapResult], None]


def available_memory() -> int:
    """Bytes of memory available now (Linux: MemAvailable), else the physical total."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def task_memory(raw_size: int) -> int:
    """Memory to reserve for summarising one rank trace of ``raw_size`` decompressed bytes."""
    return max(MIN_TASK_BYTES, raw_size * BYTES_PER_RAW_BYTE)


def pool_size(tasks: Sequence[MapTask], workers: int | None = None) -> int:
    """Processes for the local pool: the cores, the ranks, and what memory holds of the biggest rank."""
    if workers:
        return max(1, min(workers, len(tasks)))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    biggest = max((task_memory(t.raw_size) for t in tasks), default=MIN_TASK_BYTES)
    by_memory = max(1, available_memory() // biggest)
    return max(1, min(cores, len(tasks), by_memory))


def run_local(tasks: Sequence[MapTask], *, workers: int | None = None,
              on_done: Done | None = None) -> list[MapResult]:
    """Map every task in a process pool (fresh interpreters: nothing of the coordinator is copied).

    A worker that dies (killed, out of memory) breaks the pool and every task it still held; each
    of those ranks is mapped once more, alone in a fresh worker, and a rank whose worker dies again
    comes back as an error naming it.
    """
    size = pool_size(tasks, workers)
    # with several ranks at once, each decodes on one core; a lone rank may use them all
    decode = 1 if size > 1 else None
    results, lost = _pool_map(tasks, size, decode, on_done)
    for t in lost:  # once more each, alone, so one rank that kills its worker costs no other its retry
        again, still_lost = _pool_map([t], 1, decode, on_done)
        results += again
        if still_lost:
            res = MapResult(rank=t.rank, path=t.path,
                            error=f"{t.path}: rank {t.rank}: the worker process mapping it died, and again in a "
                                  "fresh worker (killed, or out of memory?)")
            results.append(res)
            if on_done:
                on_done(res)
    return results


def _pool_map(tasks: Sequence[MapTask], size: int, decode: int | None,
              on_done: Done | None) -> tuple[list[MapResult], list[MapTask]]:
    """The results of the tasks a pool of ``size`` finished, and the tasks lost with a dead worker."""
    from concurrent.futures.process import BrokenProcessPool

    results: list[MapResult] = []
    lost: list[MapTask] = []
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=size, mp_context=ctx) as pool:
        futures = {pool.submit(map_rank, msgspec.structs.replace(t, decode_workers=decode)): t for t in tasks}
        for fut in as_completed(futures):
            try:
                res = fut.result()
            except BrokenProcessPool:
                lost.append(futures[fut])
                continue
            results.append(res)
            if on_done:
                on_done(res)
    return results, sorted(lost, key=lambda t: t.rank)


def ray_address(flag: str | None) -> str | None:
    """``--ray-address``, else ``RAY_ADDRESS``; None starts a local Ray instance."""
    return flag or os.environ.get("RAY_ADDRESS") or None


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast when nothing listens at a ``HOST:PORT`` Ray address (Ray itself retries for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in address:
        return  # 'auto', 'ray://...': left to Ray
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        raise UserError(f"Ray: cannot reach a cluster at {address} ({err.strerror or err})") from None


def run_ray(tasks: Sequence[MapTask], *, address: str | None = None,
            on_done: Done | None = None) -> list[MapResult]:
    """Map every task as a Ray task (spread over the nodes); joins ``address`` or starts Ray locally.

    Paths in the tasks (traces and the set folder) must be readable and writable on every node.
    """
    try:
        import ray
    except ImportError:
        raise UserError("--engine ray needs Ray: pip install 'profuse[cluster]'") from None
    with _stdout_to_stderr():
        return _run_ray(ray, tasks, address=address, on_done=on_done)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Ray's own output on stderr while Ray runs, so stdout holds exactly the report.

    Ray's driver prints what its nodes report (``(raylet) A worker died ...``) to ``sys.stdout``
    from a thread of its own, and processes it starts inherit file descriptor 1: both point at
    stderr until Ray has shut down.
    """
    saved, saved_fd = sys.stdout, None
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        saved_fd = os.dup(1)
        os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = saved
        if saved_fd is not None:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
                os.dup2(saved_fd, 1)
            os.close(saved_fd)


def _run_ray(ray: Any, tasks: Sequence[MapTask], *, address: str | None,
             on_done: Done | None) -> list[MapResult]:
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False}
        try:
            if address:
                check_reachable(address)
                ray.init(address=address, **kwargs)
            else:
                ray.init(num_cpus=os.cpu_count() or 1, object_store_memory=RAY_OBJECT_STORE,
                         include_dashboard=False, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as err:
            where = address or "a local instance"
            raise UserError(f"Ray: cannot start or join {where}: {str(err).splitlines()[0]}") from None
        started = True
    try:
        remote = ray.remote(num_cpus=1, scheduling_strategy="SPREAD", max_retries=1)(map_rank)
        pending = {remote.options(memory=task_memory(t.raw_size)).remote(msgspec.structs.replace(t, decode_workers=1)): t
                   for t in tasks}
        results: list[MapResult] = []
        waiting = list(pending)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            for ref in ready:
                try:
                    res: MapResult = ray.get(ref)
                except ray.exceptions.RayError as err:
                    t = pending[ref]
                    res = MapResult(rank=t.rank, path=t.path,
                                    error=f"{t.path}: Ray task failed: {str(err).strip().splitlines()[0]}")
                results.append(res)
                if on_done:
                    on_done(res)
        return results
    finally:
        if started:
            ray.shutdown()


def run_tasks(engine: str, tasks: Sequence[MapTask], *, ray_address_flag: str | None = None,
              workers: int | None = None, on_done: Done | None = None) -> list[MapResult]:
    """Run the map tasks on the chosen engine (local process pool or a Ray cluster) and return their results."""
    if engine == "local":
        return run_local(tasks, workers=workers, on_done=on_done)
    if engine == "ray":
        return run_ray(tasks, address=ray_address(ray_address_flag), on_done=on_done)
    raise UserError(f"--engine must be one of {', '.join(ENGINES)} (got {engine!r})")
