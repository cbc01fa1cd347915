"""ngym's plugin core: the ``ngym_`` hooks (``hookspecs``), the manager that loads hook plugins from entry
points with failure isolation (``manager``), and the registry of resources servers (``registry``)."""

import pluggy

#: Marks a hook implementation: ``@ngym.hookimpl def ngym_register_resources_servers(register): ...``
hookimpl = pluggy.HookimplMarker("ngym")

__all__ = ["hookimpl"]
