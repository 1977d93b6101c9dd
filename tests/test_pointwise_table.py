"""The shipped table of torch's pointwise ops: equal to torch's tags, and op_class never asks torch."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest
from conftest import ALL_TRACES

from profuse.analysis import opclass, pointwise_ops


def test_the_shipped_table_is_what_torch_tags_pointwise():
    torch = pytest.importorskip("torch")
    if torch.__version__.split("+")[0] != pointwise_ops.TORCH_VERSION:
        pytest.skip(f"table generated from torch {pointwise_ops.TORCH_VERSION}, torch {torch.__version__} here: "
                    "run python -m profuse.fixes.gen_pointwise")
    from profuse.fixes.gen_pointwise import TABLE, render, torch_pointwise_ops

    # a walk of its own (over the schemas, where the generator walks the dispatcher's op names): every
    # aten overload, its tags read from torch itself
    tagged = set()
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith("aten::"):
            name = schema.name[len("aten::"):]
            if torch.Tag.pointwise in getattr(getattr(torch.ops.aten, name), schema.overload_name or "default").tags:
                tagged.add(name)
    assert frozenset(tagged) == pointwise_ops.POINTWISE_OPS
    assert {"add", "mul", "hypot", "sigmoid", "where"} <= tagged and "mm" not in tagged
    # the file is exactly what the generator writes: regenerating changes nothing
    assert TABLE.read_text() == render(torch_pointwise_ops(), pointwise_ops.TORCH_VERSION)


def _names() -> list[str]:
    """Op names to classify: the shipped tables, every cpu_op name in the shared traces (read with
    plain gzip/json), in-place spellings, and names no table has."""
    names = set(pointwise_ops.POINTWISE_OPS)
    for table in (opclass.POINTWISE, opclass.REDUCTION, opclass.NORM, opclass.SOFTMAX, opclass.COPY,
                  opclass.MATMUL, opclass.ATTENTION, opclass.VIEW):
        names |= set(table)
    names = {f"aten::{n}" for n in names} | {f"aten::{n}_" for n in names}
    for path in ALL_TRACES[:6]:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        names |= {e["name"] for e in doc.get("traceEvents", []) if e.get("cat") == "cpu_op" and "name" in e}
    return sorted(names | {"aten::no_such_op", "triton_poi_fused_add_0", "custom::thing"})


CLASSIFY = """
import json, sys
from profuse.analysis.opclass import op_class
names = json.load(sys.stdin)
print(json.dumps([op_class(n) for n in names]))
print("torch" in sys.modules and sys.modules["torch"] is not None)
"""


def _classify_in_child(names: list[str], prelude: str) -> tuple[list[str], str]:
    out = subprocess.run([sys.executable, "-c", prelude + CLASSIFY], input=json.dumps(names), capture_output=True,
                         text=True, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-2000:]
    classes, torch_loaded = out.stdout.splitlines()[-2:]
    return json.loads(classes), torch_loaded


def test_op_class_answers_the_same_with_and_without_torch_imported():
    pytest.importorskip("torch")
    names = _names()
    without, loaded_without = _classify_in_child(names, "import sys; sys.modules['torch'] = None\n")
    with_torch, loaded_with = _classify_in_child(names, "import torch\n")
    assert (loaded_without, loaded_with) == ("False", "True")
    differ = [(n, a, b) for n, a, b in zip(names, without, with_torch) if a != b]
    assert differ == []
    # and the answers are the tables': every op torch tags pointwise and no hand table claims is pointwise
    claimed = set().union(opclass.VIEW, opclass.ATTENTION, opclass.MATMUL, opclass.NORM, opclass.SOFTMAX,
                          opclass.REDUCTION, opclass.COPY)
    for n, cls in zip(names, without):
        s, b = opclass.short(n), opclass.base(n)
        if n.startswith("aten::") and b in pointwise_ops.POINTWISE_OPS and not {s, b} & claimed:
            assert cls == "pointwise", n
