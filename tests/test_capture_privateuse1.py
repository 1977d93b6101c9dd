"""``ProfileConfig(devices="neuron" | "privateuse1")``: PrivateUse1 activity when a backend is registered.

torch here is the CPU build with no PrivateUse1 backend, so the error path runs in this process. The
mapping path registers a backend named ``neuron`` through torch's own API (``rename_privateuse1_backend``
and ``_register_device_module``), which can happen once per process: it runs in a child interpreter.
There is no Neuron device here, so nothing is profiled on one.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

import profuse


@pytest.mark.parametrize("spec", ["neuron", "privateuse1", "cpu;neuron:0"])
def test_no_backend_registered_is_a_clear_error(spec: str) -> None:
    assert torch._C._get_privateuse1_backend_name() == "privateuseone"
    cfg = profuse.ProfileConfig(devices=spec)
    with pytest.raises(ValueError, match=r"needs a PrivateUse1 backend registered with torch, and this torch has none"):
        cfg.activities()


CHILD = textwrap.dedent("""
    import sys, types, torch
    from torch.profiler import ProfilerActivity
    import profuse

    torch.utils.rename_privateuse1_backend("neuron")
    mod = types.ModuleType("torch_neuron_stand_in")
    mod.is_available = lambda: True
    mod.device_count = lambda: 2
    torch._register_device_module("neuron", mod)

    for spec in ("neuron", "privateuse1", "neuron:1", "cpu;privateuse1:0"):
        acts = profuse.ProfileConfig(devices=spec).activities()
        assert acts == [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], (spec, acts)
        assert profuse.ProfileConfig(devices=spec).torch_kwargs()["activities"] == acts
    assert ProfilerActivity.PrivateUse1 in profuse.ProfileConfig().activities()  # auto picks it up
    for spec, want in (("neuron:2", "does not exist"), ("npu", "not available")):
        try:
            profuse.ProfileConfig(devices=spec).activities()
        except ValueError as err:
            assert want in str(err), (spec, err)
        else:
            raise AssertionError(spec)
    print("ok")
""")


def test_registered_backend_maps_to_privateuse1_activity() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def test_run_devices_neuron_without_backend_is_one_line(tmp_path, capsys) -> None:
    from profuse.cli import main

    out = tmp_path / "prof"
    assert main(["run", "--devices", "neuron", "--out", str(out), "--", sys.executable, "-c", "pass"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("profuse: ProfileConfig.devices: 'neuron' needs a PrivateUse1 backend") and "\n" not in err
    assert not out.exists()
