"""The lockbuild command line: parse, call the library, render results and errors. Nothing else.

Exit codes: 0 ok, 1 failure, 2 usage, 3 signature policy not met, 4 integrity (digest, size,
layout), 5 another installer holds the engine's lock, 6 this machine cannot run the bundle (test).
"""

from __future__ import annotations

import click

from lockbuild import __version__
from lockbuild.clikit import EPILOG_EXIT, _Group
from lockbuild.commands import builder, keys, node


@click.group(cls=_Group, epilog=EPILOG_EXIT, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Show a traceback with errors (also accepted after the command).")
@click.version_option(__version__, prog_name="lockbuild")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Build signed, hashed, reproducible bundles of inference engines, and install them offline.

    \b
    Builder (online):   lockbuild lock | fetch | build | sign | test
    Node (air-gapped):  lockbuild verify | inspect | install | list | remove | doctor
    Keys:               lockbuild keygen
    """
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose


for _module in (builder, keys, node):
    for _command in _module.COMMANDS:
        main.add_command(_command)

from lockbuild.site.cli import register as _register_site  # noqa: E402  (the site wing's commands)

_register_site(main)

from lockbuild.selftest.cli import register as _register_selftest  # noqa: E402  (lockbuild test, issue 15)

_register_selftest(main)

if __name__ == "__main__":  # pragma: no cover
    main()
