"""``ngym_verifiers.installed:<name>``: the server class of installed verifiers environment ``<name>``.

A module attribute per installed environment (PEP 562 ``__getattr__``), so the registry's ``module:Class``
targets import in any process (``ngym run`` children, workers) the same way.
"""

from __future__ import annotations

from ngym.plugin_api import installed_classes
from ngym_verifiers import records
from ngym_verifiers.server import VerifiersServer

__getattr__ = installed_classes(__name__, "verifiers", records.read, VerifiersServer.for_record)
