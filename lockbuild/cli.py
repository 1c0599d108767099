"""The lockbuild command line: parse, call the library, render results and errors. Nothing else.

Exit codes: 0 ok, 1 failure, 2 usage, 3 signature policy not met, 4 integrity (digest, size,
layout), 5 another installer holds the engine's lock, 6 this machine cannot run the bundle (test),
7 known vulnerabilities apply (audit, build --fail-on-vulnerabilities).
"""

from __future__ import annotations

import click

from lockbuild import __version__
from lockbuild.commands import (
    audit,
    builder,
    doctor,
    image,
    install,
    installed,
    parts,
    recipe,
    registry,
    selftest,
    signing,
    store,
    verify,
)
from lockbuild.commands.clikit import EPILOG_EXIT, PROG_NAME, Group, anywhere_options

# ``lockbuild --help`` lists the commands by who runs them, in the order they are run. A command added
# without a role still shows, under "Other commands" (and tests/structure/test_help.py fails until it has one).
ROLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Release engineer (online)", ("recipe", "lock", "fetch", "build", "sign", "test", "report")),
    (
        "Site and store (between the builder and the nodes)",
        ("import", "store", "delta", "split", "push", "pull"),
    ),
    ("Security officer (offline)", ("audit",)),
    ("Node (air-gapped)", ("verify", "inspect", "install", "image", "list", "remove", "doctor")),
    ("Keys", ("keygen",)),
)


class _Root(Group):
    """The top-level group: its help lists the commands under their roles, not in one alphabetical list."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        found = ((n, self.get_command(ctx, n)) for n in self.list_commands(ctx))
        commands = {n: c for n, c in found if c is not None and not c.hidden}
        if not commands:
            return
        width = max(len(n) for n in commands)  # one column for every section
        limit = formatter.width - 6 - width
        sections = [(title, [n for n in names if n in commands]) for title, names in ROLES]
        placed = {n for _, names in sections for n in names}
        sections.append(("Other commands", [n for n in commands if n not in placed]))
        for title, names in sections:
            if names:
                with formatter.section(title):
                    formatter.write_dl([(n.ljust(width), commands[n].get_short_help_str(limit)) for n in names])


# The line each command has in ``lockbuild --help``: a whole sentence that fits beside the name at 80
# columns (click would otherwise cut the docstring's first sentence with "..."). tests/structure/test_help.py holds it.
SUMMARIES: dict[str, str] = {
    "recipe": "Keep recipes current with the engines' releases.",
    "recipe update": "Add the builds of an engine's new release to a recipe.",
    "lock": "Resolve a recipe's builds into hashed locks.",
    "fetch": "Lock, then download and check every file a build needs.",
    "build": "Lock, fetch, pack and sign a recipe's bundles.",
    "sign": "Add a signature to a bundle or an image.",
    "test": "Prove that a bundle runs offline, in the sandbox.",
    "report": "Refresh a bundle's signed vulnerability report.",
    "audit": "Check a build against known vulnerabilities, offline.",
    "import": "Check a signed bundle, then add it to a store.",
    "store": "List, re-hash and clean up a site store.",
    "store list": "List the builds a store holds, with their sizes.",
    "store verify": "Re-hash every blob and check every build.",
    "store gc": "Remove the blobs that no build references.",
    "store index": "Write a static package index of a store for pip and uv.",
    "delta": "Write a delta: only the files a store lacks.",
    "split": "Cut a bundle into parts that cat joins again.",
    "push": "Push a signed build to an OCI registry.",
    "pull": "Pull a signed build from an OCI registry into a store.",
    "verify": "Check a bundle's signatures, then every file in it.",
    "inspect": "Show a bundle's engine, build, signers and files.",
    "install": "Install a signed bundle offline, whole or not at all.",
    "image": "Pack a signed bundle's environment into one image.",
    "list": "List the installed engines.",
    "remove": "Remove an installed engine.",
    "doctor": "Report what this node has and what it lacks.",
    "keygen": "Write a minisign-compatible key pair.",
}


def _summarise(group: click.Group, path: str = "") -> None:
    for name, command in group.commands.items():
        here = f"{path}{name}"
        if command.short_help is None and here in SUMMARIES:
            command.short_help = SUMMARIES[here]
        if isinstance(command, click.Group):
            _summarise(command, f"{here} ")


@click.group(
    cls=_Root,
    epilog=EPILOG_EXIT,
    context_settings={"help_option_names": ["-h", "--help"]},
    params=anywhere_options(with_json=True),
)
@click.version_option(__version__, "-V", "--version", prog_name=PROG_NAME)
@click.pass_context
def main(ctx: click.Context) -> None:
    """Build signed, hashed, reproducible bundles of inference engines, and install them offline.

    Each command below has --help with an example; the commands are listed by who runs them. -v, -q and
    --json may also be given after the command.
    """
    ctx.ensure_object(dict)


for _module in (
    builder,
    recipe,
    signing,
    verify,
    install,
    installed,
    doctor,
    image,
    store,
    parts,
    registry,
    selftest,
    audit,
):
    for _command in _module.COMMANDS:
        main.add_command(_command)
_summarise(main)

if __name__ == "__main__":  # pragma: no cover
    main()
