"""The CI gate on CPU runs recorded here with the real torch profiler: a 20% slowdown fails
``--fail-if-slower 5%``, an identical run passes, one step a side cannot tell (and passes)."""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import profuse
from profuse.cli import main

STEPS = 16


class Work(torch.nn.Module):
    """One step: some matmul work and a wait (a data loader, a host sync), both 20% longer with
    ``extra=0.2``. The wait keeps the step's wall time steady on a machine whose cores other jobs
    share (there, the same matmuls took 3 to 18 ms a step); the matmuls give the ops a metric."""

    def __init__(self, extra: float = 0.0) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(128, 128) / 12)
        self.reps = 5 + round(5 * extra)
        self.wait_s = 0.060 * (1 + extra)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.reps):
            x = torch.tanh(x @ self.w)
        time.sleep(self.wait_s)
        return x


def record(out: Path, extra: float, steps: int) -> Path:
    torch.manual_seed(0)
    m, x = Work(extra), torch.randn(128, 128)
    cfg = profuse.ProfileConfig(out=out, warmup=2, steps=steps)
    with torch.no_grad(), profuse.profile(cfg) as p:
        for _ in range(cfg.warmup + steps):
            m(x)
            p.step()
    assert p.bundle is not None
    return p.bundle


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    # GIVEN three runs recorded one after the other on one thread: a base, the same code again,
    # and the code with 20% more work per step (10 -> 12 matmuls); and a one-step pair
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("gate")
    return {"base": record(d / "base", 0.0, STEPS), "same": record(d / "same", 0.0, STEPS),
            "slow": record(d / "slow", 0.2, STEPS), "base1": record(d / "base1", 0.0, 1),
            "slow1": record(d / "slow1", 0.2, 1)}


def gate(capsys: pytest.CaptureFixture[str], a: Path, b: Path, *extra: str) -> tuple[int, dict]:
    rc = main(["diff", str(a), str(b), "--fail-if-slower", "5%", "--format", "json", *extra])
    d = json.loads(capsys.readouterr().out)
    return rc, {v["metric"]: v for v in d["verdicts"]}


def test_twenty_percent_slower_fails_the_gate(runs, capsys):
    rc, v = gate(capsys, runs["base"], runs["slow"])
    assert v["step"]["a_steps"] == v["step"]["b_steps"] == STEPS
    assert rc == 1 and v["step"]["fails"] and v["step"]["verdict"] == "slower"
    assert 1.05 < v["step"]["ratio"] < 1.5, "20% more matmuls and a 20% longer wait"
    assert v["step"]["p_beyond_threshold"] < 0.05


def test_an_identical_run_passes(runs, capsys):
    rc, v = gate(capsys, runs["base"], runs["same"])
    assert rc == 0 and not v["step"]["fails"]
    assert 0.85 < v["step"]["ratio"] < 1.15


def test_op_and_class_metrics_are_per_step_sums_of_the_raw_events(runs, capsys):
    # the per-step samples of --metric aten::mm / matmul: self CPU time of those ops inside each
    # ProfilerStep#N, read here from the trace's plain json
    from oracle import complete_events

    events = complete_events(next(runs["slow"].glob("*.json*")))
    steps = sorted((e for e in events if str(e["name"]).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    ops = [e for e in events if e.get("cat") == "cpu_op"]

    def self_us(e: dict) -> float:
        kids = [c for c in ops if c is not e and c["tid"] == e["tid"] and e["ts"] <= c["ts"] < e["ts"] + e["dur"]]
        top = [c for c in kids if not any(o is not c and o["ts"] <= c["ts"] < o["ts"] + o["dur"] for o in kids)]
        return float(e["dur"]) - sum(float(c["dur"]) for c in top)

    want = [sum(self_us(e) for e in ops if e["name"] == "aten::mm" and s["ts"] <= e["ts"] < s["ts"] + s["dur"])
            for s in steps]
    rc, v = gate(capsys, runs["base"], runs["slow"], "--metric", "aten::mm")
    assert rc in (0, 1) and v["aten::mm"]["b_steps"] == len(steps) == STEPS
    assert v["aten::mm"]["b_median_us"] == pytest.approx(statistics.median(want), abs=0.01)
    mm = v["aten::mm"]["b_median_us"]
    rc, v = gate(capsys, runs["base"], runs["slow"], "--metric", "matmul")
    assert v["matmul"]["b_median_us"] >= mm > 0, "the class holds aten::mm and aten::matmul"


def test_one_step_a_side_cannot_tell_and_exits_0(runs, capsys):
    rc, v = gate(capsys, runs["base1"], runs["slow1"])
    assert rc == 0 and v["step"]["verdict"] == "cannot tell" and v["step"]["a_steps"] == 1
    assert main(["diff", str(runs["base1"]), str(runs["slow1"]), "--fail-if-slower", "5%"]) == 0
    assert "cannot tell" in capsys.readouterr().out


def test_bad_gate_input_exits_2(runs, capsys):
    assert main(["diff", str(runs["base"]), str(runs["slow"]), "--metric", "aten::no_such_op",
                 "--fail-if-slower", "5%"]) == 2
    assert "--metric 'aten::no_such_op'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["diff", str(runs["base"]), str(runs["slow"]), "--fail-if-slower", "five"])
    assert e.value.code == 2


def test_junit_of_a_failing_gate_carries_one_failure(runs, tmp_path, capsys):
    from lxml import etree

    out = tmp_path / "gate.xml"
    assert main(["diff", str(runs["base"]), str(runs["slow"]), "--fail-if-slower", "5%", "--format", "junit",
                 "-o", str(out)]) == 1
    doc = etree.parse(str(out))
    etree.XMLSchema(etree.parse(str(Path(__file__).parent / "fixtures" / "junit-jenkins.xsd"))).assertValid(doc)
    failures = doc.findall(".//testcase/failure")
    assert len(failures) == 1 and doc.getroot().get("failures") == "1"
    assert failures[0].getparent().get("name") == "step"


def test_folders_of_repeated_runs_compare_distributions(tmp_path, capsys):
    # GIVEN two folders of five repeated runs each (3 steps a run), B 20% slower: each run is one
    # sample (its median step), so the folders' distributions are compared, not two numbers
    torch.set_num_threads(1)
    for side, extra in (("a", 0.0), ("b", 0.2)):
        (tmp_path / side).mkdir()
        for i in range(5):
            record(tmp_path / side / f"run{i}", extra, 3)
    work = ["--work-dir", str(tmp_path / "work"), "--workers", "2"]
    rc = main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--fail-if-slower", "5%", "--format", "json", *work])
    d = json.loads(capsys.readouterr().out)
    v = {x["metric"]: x for x in d["verdicts"]}
    assert v["step"]["a_steps"] == v["step"]["b_steps"] == 5, "one sample per run"
    assert rc == 1 and v["step"]["fails"] and v["step"]["verdict"] == "slower"
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "a"), "--fail-if-slower", "5%", *work]) == 0
    assert "per trace, step:" in capsys.readouterr().out
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--metric", "aten::mm", *work]) == 2
    # the CI outputs of folders: JUnit against the schema, markdown through a markdown parser
    from lxml import etree
    from markdown_it import MarkdownIt

    xml, md = tmp_path / "f.xml", tmp_path / "f.md"
    for fmt, out in (("junit", xml), ("markdown", md)):
        assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--fail-if-slower", "5%", "--format", fmt,
                     "-o", str(out), *work]) == 1
    doc = etree.parse(str(xml))
    etree.XMLSchema(etree.parse(str(Path(__file__).parent / "fixtures" / "junit-jenkins.xsd"))).assertValid(doc)
    assert [c.getparent().get("name") for c in doc.findall(".//testcase/failure")] == ["step"]
    tokens = MarkdownIt("commonmark").enable("table").parse(md.read_text())
    assert [t.type for t in tokens].count("tr_open") == 3, "a header and one row per metric"


def test_cpu_device_busy_is_the_ops_own_time_not_the_wait(runs, capsys):
    # on a CPU-only trace device_busy is the ops' own CPU time per step: the step's 60 ms wait
    # (time.sleep, inside the step but in no op) is not in it
    from oracle import complete_events

    events = complete_events(next(runs["base"].glob("*.json*")))
    steps = [e for e in events if str(e["name"]).startswith("ProfilerStep#")]
    _, v = gate(capsys, runs["base"], runs["same"], "--metric", "device_busy")
    assert v["device_busy"]["a_steps"] == len(steps) == STEPS
    assert 0 < v["device_busy"]["a_median_us"] < 0.5 * v["step"]["a_median_us"]
    assert v["step"]["a_median_us"] >= 60_000


def test_the_headline_says_when_its_totals_cover_unequal_steps(runs, capsys):
    # GIVEN a 16-step run and a 1-step one of the same code
    assert main(["diff", str(runs["base"]), str(runs["base1"]), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["sides"]["a"]["steps"], doc["sides"]["b"]["steps"]) == (STEPS, 1)
    note = f"totals over {STEPS} and 1 steps: the verdicts compare per step"
    assert doc["totals_note"] == note
    # THEN the device-time headline, a total over each run, says so in the console and the Markdown comment
    for fmt in ("table", "markdown"):
        assert main(["diff", str(runs["base"]), str(runs["base1"]), "--format", fmt]) == 0
        assert f"({note})" in capsys.readouterr().out, fmt
    # AND an equal pair says nothing of it
    assert main(["diff", str(runs["base"]), str(runs["same"]), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals_note"] == ""
    assert main(["diff", str(runs["base"]), str(runs["same"])]) == 0
    assert "totals over" not in capsys.readouterr().out
