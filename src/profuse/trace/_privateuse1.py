"""The name of a PrivateUse1 backend (Neuron, ...), read from the trace itself."""
from __future__ import annotations

import re
from collections.abc import Iterable

from .vocabulary import device_of_calls

# Kineto names a device's process "<Backend> <index>" (GPU 0, MTIA 17); these are not backend names.
_GENERIC = {"gpu", "cpu", "spans", "traces", "device", "privateuse1", "privateuseone"}
_PROCESS = re.compile(r"^(?P<name>[A-Za-z][\w.-]*?)(?: (?:device|core))? \d+$", re.IGNORECASE)


def privateuse1_name(runtime_names: Iterable[object], process_names: Iterable[str]) -> str:
    """'Neuron' from nrt_* runtime calls or a device process named 'Neuron 0'; else 'PrivateUse1'."""
    backend = device_of_calls(list(runtime_names))  # the device vocabulary's call prefixes (nrt_*: Neuron)
    if backend is not None:
        return backend
    for p in process_names:
        m = _PROCESS.match(p.strip())
        if m and m.group("name").lower() not in _GENERIC and not m.group("name").lower().startswith("python"):
            return m.group("name")
    return "PrivateUse1"
