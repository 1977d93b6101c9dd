"""The fusion search, scope instances, CPU interruptions and the CPU budget's painting by column sweeps
(issue 44), each checked against the per-event Python rule it replaced (tests/fusion_oracle.py): on
every shared trace, on CPU profiles recorded here, and on hand-built nested and overlapping units."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import fusion_oracle as oracle
import numpy as np
import pytest
from conftest import ALL_TRACES, trace_id

import profuse
from profuse.analysis import scopes
from profuse.analysis.advice import fusion, interruptions
from profuse.analysis.busy import union_ns, union_per_group
from profuse.analysis.diagnosis import cpu_budget
from profuse.analysis.opclass import Tensor, op_class
from profuse.analysis.scopes import NO_PARENT, ScopeInstance, Unit, UnitTable

# --- the comparisons --------------------------------------------------------------------------------


def _old_matches(ms: list[oracle.Match]) -> list[tuple[Any, ...]]:
    return [(m.pattern, oracle.scope_title(m.scope), [u.id for u in m.units], m.device_ns, m.saving_ns,
             m.confidence, m.bytes_now, m.bytes_fused, m.intermediates) for m in ms]


def _new_matches(t: UnitTable, ms: list[fusion.Match]) -> list[tuple[Any, ...]]:
    return [(m.pattern, m.title, t.unit_id[m.rows].tolist(), m.device_ns, m.saving_ns, m.confidence,
             m.facts.bytes_now, m.facts.bytes_fused, m.facts.intermediates) for m in ms]


def _spans(tr: profuse.Trace, seed: int) -> list[tuple[int, int, int, int]]:
    """Step annotations as the budget paints them, plus random windows on random threads and the whole trace."""
    out = [(int(th), int(a), int(b), int(i)) for i, th, a, b in tr.con.execute(
        "SELECT id, thread, ts, ts + dur FROM events WHERE kind = 'annotation' ORDER BY ts, id LIMIT 12").fetchall()]
    lo, hi = tr.con.execute("SELECT min(ts), max(ts + dur) FROM events WHERE thread IS NOT NULL").fetchone() or (None, None)
    threads = [int(t) for (t,) in tr.con.execute(
        "SELECT DISTINCT thread FROM events WHERE thread IS NOT NULL ORDER BY 1").fetchall()]
    if lo is None:
        return out
    rng = np.random.default_rng(seed)
    for _ in range(8):
        a, b = sorted(int(x) for x in rng.integers(lo, hi + 1, 2))
        out.append((int(rng.choice(threads)), a, b, -1))
    return [*out, (threads[0], int(lo), int(hi), -1)]


def _same_as_before(path: Path) -> None:
    with profuse.load(path, cache=False) as tr:
        # scope instances: every instance, its units in order, its inclusive figures
        assert scopes.scope_instances(tr) == oracle.old_scope_instances(tr)
        # the fusion search: every match (pattern, scope, units, time, saving, bytes) and every candidate
        t = scopes.unit_table(tr)
        assert _new_matches(t, fusion.find_matches(tr)) == _old_matches(oracle.find_matches(tr))
        assert fusion.fusion_candidates(tr) == oracle.fusion_candidates(tr)
        # a CPU scope's instances, ops, busy and window (asked of every trace: the rule reads units only)
        got = {k: (g.instances, g.kernels, g.busy_ns, g.window_ns) for k, g in interruptions._cpu_scopes(tr).items()}
        assert list(got.items()) == list(oracle.old_cpu_scopes(tr).items())
        # the CPU budget of steps and of random windows seen from random threads
        for span in _spans(tr, len(str(path))):
            assert cpu_budget.span_ns(tr, *span).tolist() == oracle.old_span_ns(tr, *span).tolist(), span


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_sweeps_are_the_previous_rules_on_every_trace(path: Path) -> None:
    # GIVEN a real trace; WHEN scope instances, fusion matches and candidates, CPU scopes and span budgets
    # are found by the sweeps and by the previous Python rules; THEN they are the same, field for field
    _same_as_before(path)


@pytest.fixture(scope="module")
def cpu_profiles(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """CPU profiles recorded here with modules, shapes and stacks: every naive pattern module, a small Llama
    and BERT (random weights from a config), and the Llama once more with ops only (no shapes, no scopes)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import naive_models as nm

    torch.manual_seed(0)
    x, r = torch.randn(4, 32, 64), torch.randn(4, 32, 64)
    q, k, v = (torch.randn(2, 4, 32, 64) for _ in range(3))
    cos, sin = torch.randn(32, 64), torch.randn(32, 64)
    mods = [nm.NaiveRMSNorm(64), nm.NaiveLayerNorm(64), nm.NaiveSoftmax(), nm.NaiveGeluTanh(), nm.NaiveGeluErf(),
            nm.NaiveSwiGLU(64), nm.NaiveBiasAct(64), nm.NaiveQuickGELU(), nm.NaiveSiLU(), nm.NaiveSigmoidSwiGLU(64)]

    def naive() -> None:
        for m in mods:
            m(x)
        nm.NaiveResidualNorm(64)(x, r)
        nm.NaiveAttention()(q, k, v)
        nm.NaiveAttentionDropout().eval()(q, k, v)
        nm.NaiveRotary()(q, cos, sin)

    ids = torch.randint(0, 500, (2, 16))
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
        vocab_size=500)).eval()
    bert = transformers.BertModel(transformers.BertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=500)).eval()
    out = []
    for name, fn, streams in [("naive", naive, "ops,shapes,python"), ("llama", lambda: llama(ids), "ops,shapes,python"),
                              ("bert", lambda: bert(ids), "ops,shapes,python"), ("llama_ops", lambda: llama(ids), "ops")]:
        cfg = profuse.ProfileConfig(out=tmp_path_factory.mktemp(name) / "b", warmup=1, steps=2, streams=streams)
        with torch.no_grad(), profuse.profile(cfg) as p:
            for _ in range(3):
                fn()
                p.step()
        out.append(Path(p.bundle))
    return out


def test_sweeps_are_the_previous_rules_on_recorded_cpu_profiles(cpu_profiles: list[Path]) -> None:
    # GIVEN CPU profiles of real modules (every pattern, a Llama, a BERT, one without shapes or scopes)
    for bundle in cpu_profiles:
        # THEN every sweep gives what the previous rule gives
        _same_as_before(bundle)
    with profuse.load(cpu_profiles[0], cache=False) as tr:   # and the patterns are there to be found
        assert len({c.pattern for c in fusion.fusion_candidates(tr)}) >= 8


# --- hand-built units -------------------------------------------------------------------------------

OPS = ["aten::add", "aten::add_", "aten::mul", "aten::sigmoid", "aten::silu", "aten::mm", "aten::matmul",
       "aten::softmax", "aten::exp", "aten::sum", "aten::div", "aten::view", "aten::layer_norm",
       "aten::native_batch_norm", "aten::pow", "aten::mean", "aten::rsqrt", "aten::empty", "aten::copy_",
       "aten::cat", "aten::neg", "aten::tanh", "aten::erf", "aten::relu", "aten::sub", "aten::var", "aten::sqrt",
       "aten::linear", "aten::embedding"]
SCOPES = ["LayerNorm", "GELU", "SiLU", "Dropout", "Identity", "Block", "LlamaRMSNorm"]
SHAPES: list[tuple[Tensor, ...]] = [
    (), (Tensor((64,), 4),), (Tensor((4, 64), 4), Tensor((4, 64), 4)), (Tensor((4, 64), 4), Tensor((64,), 4)),
    (Tensor((4, 1), 4),), (Tensor((), 4),), (Tensor((4, 64), 2), Tensor((), 4)), (Tensor((256,), 4), Tensor((256,), 4)),
    (Tensor((4, 64, 64), 2), Tensor((4, 64, 64), 2)), (Tensor((4, 64), 4),)]


def _random_instances(rng: np.random.Generator) -> list[ScopeInstance]:
    """Instances of random units (ops from a pool biased to the patterns, child scopes, shapes, kernels)."""
    out, uid = [], 1
    for s in range(int(rng.integers(1, 6))):
        inst = ScopeInstance(1000 + s, "module", str(rng.choice(["Attn", "MLP", "Norm"])), "", None, 0, 0)
        ts = 0
        for _ in range(int(rng.integers(0, 40))):
            ts += int(rng.integers(0, 3))   # equal starts happen
            if rng.random() < 0.15:
                name, kind, ins = str(rng.choice(SCOPES)), "scope", []
            else:
                name, kind, ins = str(rng.choice(OPS)), "op", list(SHAPES[int(rng.integers(len(SHAPES)))])
            inst.units.append(Unit(uid, kind, name, ts, int(rng.integers(0, 5)), int(rng.integers(0, 1000)),
                                   int(rng.choice([0, 1, 1, 2, 3])), ins))
            uid += 1
        out.append(inst)
    return out


def _table(instances: list[ScopeInstance]) -> UnitTable:
    """A unit table holding these instances and their units as they are."""
    units = [u for inst in instances for u in inst.units]
    names = sorted({u.name for u in units})
    shapes: list[tuple[Tensor, ...]] = [()]
    for u in units:
        if u.ins and tuple(u.ins) not in shapes:
            shapes.append(tuple(u.ins))

    def col(values: list[Any], dtype: Any = np.int64) -> np.ndarray:
        return np.asarray(values, dtype=dtype)

    z = col([0] * len(instances))
    return UnitTable(
        sid=col([i.id for i in instances]), kind=[i.kind for i in instances], name=[i.name for i in instances],
        label=["" for _ in instances], parent=col([NO_PARENT] * len(instances)), ts=z, dur=z, device_ns=z, kernels=z,
        bounds=col([0, *np.cumsum([len(i.units) for i in instances]).tolist()]),
        unit_inst=col([k for k, i in enumerate(instances) for _ in i.units]), unit_id=col([u.id for u in units]),
        is_scope=col([u.kind == "scope" for u in units], bool), unit_name=col([names.index(u.name) for u in units]),
        unit_ts=col([u.ts for u in units]), unit_dur=col([u.dur for u in units]),
        unit_device_ns=col([u.device_ns for u in units]), unit_kernels=col([u.kernels for u in units]),
        unit_shape=col([shapes.index(tuple(u.ins)) if u.ins else 0 for u in units]), names=names, shapes=shapes)


def test_fusion_sweeps_are_the_unit_rules_on_random_units() -> None:
    rng = np.random.default_rng(44)
    wanted = {n for n in OPS if op_class(n) in fusion._MATCHABLE}
    found = set()
    for trial in range(400):
        # GIVEN instances of random units, on a CPU or a device, some ops copies
        instances = _random_instances(rng)
        cpu = bool(rng.random() < 0.5)
        ids = [u.id for i in instances for u in i.units]
        copies = frozenset(int(x) for x in rng.choice(ids, size=min(len(ids), 3), replace=False)) if ids else frozenset()
        # WHEN the sweeps search their table and the previous rules their Unit objects
        t = _table(instances)
        got = fusion.matches_in(t, cpu, copies, wanted)
        held = [i for i in instances if any(u.kind == "op" and u.name in wanted for u in i.units)]
        want = oracle.matches_of(held, cpu, copies)
        # THEN the matches are the same: pattern, scope, units in order, time, saving, confidence, bytes
        assert _new_matches(t, got) == _old_matches(want), trial
        assert fusion.fusion_candidates(None, got) == oracle.fusion_candidates(None, want), trial  # type: ignore[arg-type]
        found |= {m.pattern for m in got}
    # and the units were varied enough to reach every kind of match
    assert {"attention (matmul-softmax-matmul)", "SiLU x mul (SwiGLU)", "multi-kernel norm", "pointwise chain",
            "residual add + norm", "bias + activation"} <= found, found


def test_last_cover_is_painting_in_order() -> None:
    rng = np.random.default_rng(7)
    for trial in range(300):
        # GIVEN intervals over n pieces: nested, overlapping, empty, repeated, covering everything or nothing
        n = int(rng.integers(0, 70))
        m = int(rng.integers(0, 50))
        first = rng.integers(0, n + 1, m)
        last = np.minimum(first + rng.integers(0, max(n, 1) + 1, m), n)
        # WHEN each piece's last covering interval is found by the tree
        got = cpu_budget.last_cover(first, last, n)
        # THEN it is what painting the intervals one after another leaves
        want = np.full(n, -1)
        for i, (a, b) in enumerate(zip(first.tolist(), last.tolist())):
            want[a:b] = i
        assert got.tolist() == want.tolist(), trial


def test_union_per_group_is_each_groups_union() -> None:
    rng = np.random.default_rng(3)
    for trial in range(300):
        # GIVEN groups of intervals (nested, overlapping, touching, zero-length), each group's by start
        groups = [sorted((int(a), int(a + d)) for a, d in zip(rng.integers(-50, 50, k), rng.integers(0, 40, k)))
                  for k in rng.integers(1, 12, int(rng.integers(1, 8)))]
        group = np.asarray([g for g, rows in enumerate(groups) for _ in rows], dtype=np.int64)
        start = np.asarray([a for rows in groups for a, _ in rows], dtype=np.int64)
        end = np.asarray([b for rows in groups for _, b in rows], dtype=np.int64)
        # WHEN the union and window of each are found in one sweep
        busy, window, at = union_per_group(group, start, end)
        # THEN they are each group's own union and first-to-last span
        assert busy.tolist() == [union_ns(np.asarray([a for a, _ in g]), np.asarray([b for _, b in g])) for g in groups]
        assert window.tolist() == [max(b for _, b in g) - min(a for a, _ in g) for g in groups], trial
        assert group[at].tolist() == list(range(len(groups)))


def test_roll_up_of_a_deep_nest() -> None:
    # GIVEN 3,000 scopes each inside the one before, and beside them a flat row, each holding own time
    n = 3000
    par = np.concatenate([[-1], np.arange(n - 1), [-1, n, n]]).astype(np.int64)
    own = np.arange(1, n + 4, dtype=np.int64)
    # WHEN the inclusive figures are rolled up
    dev, kern = scopes._roll_up(par, own, np.ones(n + 3, dtype=np.int64))
    # THEN each holds its own and everything below it
    assert dev[:n].tolist() == np.cumsum(own[:n][::-1])[::-1].tolist()
    assert kern[0] == n and kern[n - 1] == 1
    assert dev[n:].tolist() == [own[n] + own[n + 1] + own[n + 2], own[n + 1], own[n + 2]]
