"""``ngym_ors.installed:<name>``: the server class of installed ORS environment ``<name>``.

A module attribute per installed environment (PEP 562 ``__getattr__``), so the registry's ``module:Class``
targets import in any process (``ngym run`` children, workers) the same way.
"""

from __future__ import annotations

from ngym.plugin_api import installed_classes
from ngym_ors import records
from ngym_ors.server import OrsServer

__getattr__ = installed_classes(__name__, "ORS", records.read, OrsServer.for_record)
