"""The lockbuild command line: parse, call the library, render results and errors. Nothing else.

Exit codes: 0 ok, 1 failure, 2 usage, 3 signature policy not met, 4 integrity (digest, size,
layout), 5 another installer holds the engine's lock, 6 this machine cannot run the bundle (test).
"""

from __future__ import annotations

import click

from lockbuild import __version__
from lockbuild.clikit import EPILOG_EXIT, _Group
from lockbuild.commands import builder, image, keys, node

# ``lockbuild --help`` lists the commands by who runs them, in the order they are run. A command added
# without a role still shows, under "Other commands" (and tests/test_help.py fails until it has one).
ROLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Release engineer (online)", ("lock", "fetch", "build", "sign", "test")),
    ("Site and store (between the builder and the nodes)", ("import", "store", "delta", "split", "push", "pull")),
    ("Node (air-gapped)", ("verify", "inspect", "install", "image", "list", "remove", "doctor")),
    ("Keys", ("keygen",)),
)


class _Root(_Group):
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


@click.group(cls=_Root, epilog=EPILOG_EXIT, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Show a traceback with errors (also accepted after the command).")
@click.version_option(__version__, prog_name="lockbuild")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Build signed, hashed, reproducible bundles of inference engines, and install them offline.

    Each command below has --help with an example; the commands are listed by who runs them.
    """
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose


for _module in (builder, keys, node, image):
    for _command in _module.COMMANDS:
        main.add_command(_command)

from lockbuild.site.cli import register as _register_site  # noqa: E402  (the site wing's commands)

_register_site(main)

from lockbuild.selftest.cli import register as _register_selftest  # noqa: E402  (lockbuild test, issue 15)

_register_selftest(main)

if __name__ == "__main__":  # pragma: no cover
    main()
