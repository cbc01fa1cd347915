"""ngym-nemo-gym: run NeMo Gym 0.7.0 environments unchanged on ngym.

This distribution provides two import packages:

- ``nemo_gym``: NeMo Gym's module names (``nemo_gym.base_resources_server``, ``nemo_gym.server_utils``, ...),
  implemented on ngym, so an environment's ``from nemo_gym... import ...`` resolves to ngym.
- ``ngym_nemo_gym`` (this one): what ngym's own tooling calls — where other servers are
  (:func:`set_server_urls`, :func:`set_global_config`) and how to run an environment's own tests.

``nemo_gym`` is built on this package, never the reverse: nothing here imports ``nemo_gym``, so ngym's tooling
uses it without loading NeMo's API (``tests/unit/test_layers.py`` checks it).
"""

from ngym_nemo_gym.servers import (
    SERVER_URLS_ENV,
    ServerNotConfigured,
    global_config,
    resolve_server,
    set_global_config,
    set_server_urls,
)

__all__ = [
    "SERVER_URLS_ENV",
    "ServerNotConfigured",
    "global_config",
    "resolve_server",
    "set_global_config",
    "set_server_urls",
]
