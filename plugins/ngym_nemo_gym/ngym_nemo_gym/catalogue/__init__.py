"""NeMo Gym's catalogue as an ngym install source: ``ngym install nemo-gym:NAME`` (or a NeMo Gym folder).

- ``wheel``: the nemo-gym 0.7.0 wheel (downloaded once into ``~/.cache/ngym/nemo-wheel``) and its environments;
- ``folder``: one environment's folder read (its config, requirements, sibling environments it imports);
- ``runtime_deps``: the requirements its code imports but does not declare;
- ``package``: the generated pip project that registers it as an ngym environment beside NeMo's own ``app.py``;
- ``install`` / ``uninstall``: pip in ngym's interpreter, name clashes, code-only siblings;
- ``catalog``: what ``ngym list --available nemo-gym`` shows.

``ngym_nemo_gym.plugin`` registers it through the ``ngym_register_install_sources`` hook.
"""
