"""Install sources: the one contract by which an ecosystem plugs its environments into ``ngym install``.

``ngym install <prefix>:<what>`` (and ``ngym uninstall``, ``ngym list --available <prefix>``) asks the plugins that
implement the ``ngym_register_install_sources`` hook; ngym itself names no ecosystem. NeMo Gym
(``ngym-nemo-gym``), OpenEnv (``ngym-openenv``) and verifiers (``ngym-verifiers``) each register one
``InstallSource`` from their own distribution::

    from ngym import hookimpl
    from ngym.plugin_api import InstallSource, InstallSources

    @hookimpl
    def ngym_register_install_sources(register: InstallSources) -> None:
        register.add(
            InstallSource.lazy(
                "mycatalogue",
                "my_plugin.install:install_one",  # install_one(source, *, as_name, domain, options, verbose, echo)
                available="my_plugin.catalog:available",
                description="my catalogue's environments",
            )
        )

Keep the hook module light: every ``ngym install`` loads it. ``InstallSource.lazy`` names the functions as
``"module:name"`` (imported on their first call) and refuses the install flags a source does not read in one line;
an ``InstallSource`` built by hand takes the functions themselves (import the heavy parts inside them).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from ngym.errors import NgymError, PluginError
from ngym.plugins.manager import make_plugin_manager
from ngym.suggest import did_you_mean


class Echo(Protocol):
    def __call__(self, message: str, /) -> Any: ...


class InstallFunction(Protocol):
    """Install one environment of the source; ``source`` is what the user typed (prefix included, if they gave one)."""

    def __call__(
        self,
        source: str,
        *,
        as_name: str | None,
        domain: str | None,
        options: dict[str, str],
        replace: bool,
        verbose: bool,
        echo: Echo,
    ) -> Any: ...


class UninstallFunction(Protocol):
    """Uninstall the environments among ``names`` that the source installed (each as the user typed it: an
    environment name, a distribution, or ``prefix:name``), together; the names it handled (the rest go on to the
    other sources, then to pip)."""

    def __call__(self, names: list[str], *, yes: bool, echo: Echo) -> list[str]: ...


class Listing(list[dict[str, Any]]):
    """What ``available`` may return instead of a plain list: the rows, and ``note``, one line said under them
    (e.g. that the source could not ask its index, so nothing listed was checked)."""

    def __init__(self, rows: Iterable[dict[str, Any]] = (), note: str = "") -> None:
        super().__init__(rows)
        self.note = note


@dataclass(frozen=True)
class InstallSource:
    """One ecosystem ``ngym install <prefix>:<what>`` installs from.

    - ``install``: installs one environment (see ``InstallFunction``); errors are ``NgymError`` (one CLI line).
    - ``available``: rows for ``ngym list --available <prefix>``: ``name``, ``domain``, ``version``,
      ``installed_as``, ``description`` (more keys go to ``--json`` only); a ``Listing`` adds a line under them.
    - ``uninstall``: for a source whose environments need more than ``pip uninstall`` (kept outside pip, or
      with files pip does not track); None leaves them to pip like any plugin.
    - ``claims``: whether a source given *without* the prefix is this ecosystem's (e.g. a NeMo Gym environment
      folder); None claims nothing.
    - ``options``: the ``-o KEY=VALUE`` options ``install`` reads, for ``ngym install --help``.
    """

    prefix: str
    install: InstallFunction
    available: Callable[[], list[dict[str, Any]]] | None = None
    uninstall: UninstallFunction | None = None
    claims: Callable[[str], bool] | None = None
    description: str = ""
    options: str = ""

    @classmethod
    def lazy(
        cls,
        prefix: str,
        install: str | Callable[..., Any],
        *,
        available: str | Callable[[], list[dict[str, Any]]] | None = None,
        uninstall: str | UninstallFunction | None = None,
        claims: str | Callable[[str], bool] | None = None,
        description: str = "",
        options: str = "",
        reads: Collection[str] = ("domain", "options"),
    ) -> InstallSource:
        """An install source whose functions are named ``"module:name"`` (imported on their first call, so the
        hook module stays light) or given as they are.

        ``install`` is called as ``install(source, *, as_name, verbose, echo, **flags)``, ``flags`` being those of
        ``domain``, ``options`` and ``replace`` that ``reads`` names. A flag the user gave that the source does not
        read is refused in one line before anything runs (``--replace does not apply to openenv: environments``).
        """
        unknown = set(reads) - set(_FLAGS)
        if unknown:
            raise PluginError(f"install source {prefix!r}: reads {sorted(unknown)}; the flags are {list(_FLAGS)}")
        run = _lazy(install)

        def install_one(
            source: str,
            *,
            as_name: str | None,
            domain: str | None,
            options: dict[str, str],
            replace: bool,
            verbose: bool,
            echo: Echo,
        ) -> Any:
            given = {"domain": domain, "options": options, "replace": replace}
            refused = [_FLAGS[flag] for flag in _FLAGS if given[flag] and flag not in reads]
            if refused:
                verb = "does" if len(refused) == 1 else "do"
                tail = "; uninstall the other environment first" if given["replace"] and "replace" not in reads else ""
                raise NgymError(f"{' and '.join(refused)} {verb} not apply to {prefix}: environments{tail}")
            flags = {flag: given[flag] for flag in _FLAGS if flag in reads}
            return run(source, as_name=as_name, verbose=verbose, echo=echo, **flags)

        return cls(
            prefix=prefix,
            install=install_one,
            available=_lazy(available) if available is not None else None,
            uninstall=_lazy(uninstall) if uninstall is not None else None,
            claims=_lazy(claims) if claims is not None else None,
            description=description,
            options=options,
        )


#: The install flags a source may read (``InstallSource.lazy``'s ``reads``), each as the user writes it.
_FLAGS = {"domain": "--domain", "options": "--option", "replace": "--replace"}


def _lazy(function: str | Callable[..., Any]) -> Any:
    """``function`` itself, or for ``"module:name"`` a function that imports ``module`` on its first call and
    calls its ``name``."""
    if not isinstance(function, str):
        return function
    module_name, colon, name = function.partition(":")
    if not (colon and module_name and name):
        raise PluginError(f"{function!r}: name a function as 'module:name'")
    found: list[Callable[..., Any]] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if not found:
            found.append(getattr(importlib.import_module(module_name), name))
        return found[0](*args, **kwargs)

    call.__qualname__ = call.__name__ = name
    return call


class InstallSources:
    """The registered install sources, by prefix (what the hook's ``register`` is)."""

    def __init__(self) -> None:
        self._by_prefix: dict[str, tuple[InstallSource, str]] = {}
        self._current_plugin = "?"

    def add(self, source: InstallSource) -> None:
        """Register ``source``; a prefix two plugins claim is a ``PluginError`` naming both."""
        if not source.prefix or ":" in source.prefix:
            raise PluginError(f"install source prefix {source.prefix!r}: a non-empty name without ':'")
        if source.prefix in self._by_prefix:
            other = self._by_prefix[source.prefix][1]
            raise PluginError(
                f"install source {source.prefix!r} is registered by both {other} and {self._current_plugin}"
            )
        self._by_prefix[source.prefix] = (source, self._current_plugin)

    def prefixes(self) -> list[str]:
        return sorted(self._by_prefix)

    def __iter__(self) -> Iterator[InstallSource]:
        return iter(entry[0] for _, entry in sorted(self._by_prefix.items()))

    def get(self, prefix: str) -> InstallSource | None:
        entry = self._by_prefix.get(prefix)
        return entry[0] if entry else None

    def named(self, prefix: str) -> InstallSource:
        """The source of ``prefix``, or one readable error saying which plugin would provide it."""
        found = self.get(prefix)
        if found is not None:
            return found
        known = ", ".join(self.prefixes()) or "none"
        hint = did_you_mean(prefix, self.prefixes())
        # A likely typo gets only its correction: "pip install ngym-<the typo>" would send the user to the package
        # index for a name nobody publishes (or someone squats).
        plugin = "" if hint else f"; ecosystem plugins are named ngym-<ecosystem>: pip install ngym-{prefix}"
        raise NgymError(
            f"{prefix}: no installed plugin installs '{prefix}:' environments{hint} (installed sources: {known})"
            + plugin
        )

    def for_source(self, text: str) -> InstallSource | None:
        """The source ``text`` belongs to: by its ``prefix:`` when a plugin registered that prefix, else the
        first source that claims it (a NeMo Gym folder), else None (a plain pip package)."""
        prefix, colon, _ = text.partition(":")
        if colon and prefix in self._by_prefix:
            return self._by_prefix[prefix][0]
        for source in self:
            if source.claims is not None and source.claims(text):
                return source
        return None


def collect_install_sources(hook_caller: Any, plugin_names: Callable[[Any], str]) -> InstallSources:
    """Ask every plugin's ``ngym_register_install_sources`` implementation, each with ``register``."""
    register = InstallSources()
    for impl in hook_caller.get_hookimpls():  # in registration order
        register._current_plugin = plugin_names(impl)
        impl.function(register=register)
    register._current_plugin = "?"
    return register


def install_sources() -> InstallSources:
    """The install sources of every installed hook plugin. A broken plugin is left out, never fatal, even with
    ``NGYM_STRICT_PLUGINS=1``: installing and uninstalling must work while a plugin is broken."""
    pm = make_plugin_manager(lenient=True)

    def plugin_name(impl: Any) -> str:
        origin = pm.origin(impl.plugin_name)
        return f"{impl.plugin_name} ({origin.distribution})" if origin.distribution else impl.plugin_name

    return collect_install_sources(pm.hook.ngym_register_install_sources, plugin_name)


__all__ = ["Echo", "InstallFunction", "InstallSource", "InstallSources", "UninstallFunction", "install_sources"]
