"""The site wing's commands: import, store list|verify|gc|index, split, delta, push, pull.

Registered on the main group by ``register``, called at the end of ``lockbuild.cli`` (import that
module, not this one); each command parses, calls the library, renders. One module per family:
``clistore`` (import and the store group, with ``cliindex``'s ``store index``), ``cliparts`` (split and
delta), ``cliregistry`` (push and pull; network code is imported inside them only).
"""

from __future__ import annotations

import click

from lockbuild.site import cliparts, cliregistry, clistore


def register(main: click.Group) -> None:
    for module in (clistore, cliparts, cliregistry):
        for command in module.COMMANDS:
            main.add_command(command)
