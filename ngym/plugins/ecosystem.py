"""What an ecosystem plugin that installs environments outside pip shares (``ngym-ors``, ``ngym-verifiers``).

Such a plugin keeps one record per installed environment (``RecordShelf``), serves each through a server class
made from its record, and registers two things with ngym; ``Ecosystem`` makes both hooks. The plugin's hook
module (its ``ngym`` entry point) is::

    ngym_register_resources_servers, ngym_register_install_sources = Ecosystem(
        prefix="ors",  # ngym install ors:...
        package="ngym_ors",  # ngym_ors.install:install_source / :uninstall, ngym_ors.installed:<name>
        shelf=records.SHELF,
        description="Open Reward Standard environments: ...",
    ).hooks()

``ngym_register_resources_servers`` registers every record as ``<package>.installed:<name>`` with its own folder;
``ngym_register_install_sources`` registers ``ngym install`` / ``uninstall`` / ``list --available <prefix>:``.

The server class of one installed environment is an ``InstalledServer`` (``ngym.plugins.installed_server``). This
module stays light (every ``ngym`` command loads the hook modules): it imports no server runtime.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ngym.plugins import hookimpl
from ngym.plugins.sources import Echo, InstallSource, InstallSources

if TYPE_CHECKING:
    from ngym.plugins.record_shelf import RecordShelf
    from ngym.plugins.registry import Register


class InstalledRecord(Protocol):
    """What ngym reads of an installed environment's record (a plugin's dataclass has more)."""

    name: str
    domain: str
    description: str
    tools: list[dict[str, Any]]


@dataclass(frozen=True)
class Ecosystem:
    """An ecosystem plugin's registrations: its installed environments and its install source.

    ``<package>.install`` defines ``install_source`` (an ``InstallFunction``) and ``uninstall(name, *, echo) ->
    bool``; ``<package>.installed`` resolves ``<name>`` to the server class (``installed_classes``)."""

    prefix: str
    package: str
    shelf: RecordShelf[Any]
    description: str = ""
    options: str = ""
    available: str | None = None  # "module:function" for ``ngym list --available <prefix>``

    def hooks(self) -> tuple[Callable[[Register], None], Callable[[InstallSources], None]]:
        """The plugin's two hook implementations (``ngym_register_resources_servers``,
        ``ngym_register_install_sources``), to assign under those names in its hook module."""

        @hookimpl
        def ngym_register_resources_servers(register: Register) -> None:
            self.register_servers(register)

        @hookimpl
        def ngym_register_install_sources(register: InstallSources) -> None:
            self.register_source(register)

        return ngym_register_resources_servers, ngym_register_install_sources

    def register_servers(self, register: Register) -> None:
        """Every installed record a resources server, registered lazily by target (``ngym list`` starts
        nothing), with its own folder (``<records>/<name>``, whose ``data/`` ``ngym install`` wrote)."""
        for record in self.shelf.all():
            register.add(
                f"{self.package}.installed:{record.name}",
                name=record.name,
                domain=record.domain,
                description=record.description,
                folder=self.shelf.folder_of(record.name),
            )

    def register_source(self, register: InstallSources) -> None:
        """``ngym install <prefix>:...`` (``<package>.install:install_source``), its uninstall and listing."""
        register.add(
            InstallSource.lazy(
                self.prefix,
                f"{self.package}.install:install_source",
                available=self.available,
                uninstall=self._uninstall,
                description=self.description,
                options=self.options,
            )
        )

    def _uninstall(self, names: list[str], *, yes: bool, echo: Echo) -> list[str]:
        """The installed environments among ``names`` (``name`` or ``<prefix>:name``), removed; the others are left
        to the other sources and pip."""
        remove = importlib.import_module(f"{self.package}.install").uninstall
        return [name for name in names if remove(name.removeprefix(f"{self.prefix}:"), echo=echo)]
