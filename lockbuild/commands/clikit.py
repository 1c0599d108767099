"""The command line's shared parts: the command and group classes (errors, --json, -v anywhere), result
and warning rendering, settings and passphrases read once, and the options several commands share.

Command modules (``lockbuild.commands``, the site wing, the self-test) import these; ``lockbuild.cli``
holds the group and registers them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lockbuild.documents import JSON
from lockbuild.errors import LockbuildError, SignatureError
from lockbuild.times import parse_time

if TYPE_CHECKING:  # imported when a command runs, not when the CLI starts
    from lockbuild.progress import Progress
    from lockbuild.settings import Settings

EPILOG_EXIT = (
    "Exit codes: 0 ok, 1 failure, 2 usage, 3 signature, 4 integrity, 5 busy, 6 cannot run the bundle here (test)."
)


PROG_NAME = "lockbuild"
COMPLETE_VAR = "_LOCKBUILD_COMPLETE"  # eval "$(_LOCKBUILD_COMPLETE=bash_source lockbuild)"


def _root_flag(key: str) -> Callable[[click.Context, click.Parameter, bool], bool]:
    """A flag accepted before or after the command's name: either place sets it for the whole run."""

    def set_flag(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        if value:
            ctx.ensure_object(dict)
            ctx.find_root().ensure_object(dict)[key] = True
        return value

    return set_flag


_verbose = _root_flag("verbose")
VERBOSE_HELP = "Show a traceback with errors."
QUIET_HELP = "Print only the result: no progress and no warnings on stderr (errors still show)."
JSON_HELP = "Print a machine-readable JSON result on stdout."


def anywhere_options(*, with_json: bool) -> list[click.Option]:
    """-v/--verbose and -q/--quiet (and at the top, --json): each sets the run's flag wherever it is given."""
    options = [
        click.Option(
            ["-v", "--verbose"], is_flag=True, expose_value=False, callback=_verbose, is_eager=True, help=VERBOSE_HELP
        ),
        click.Option(
            ["-q", "--quiet"],
            is_flag=True,
            expose_value=False,
            callback=_root_flag("quiet"),
            is_eager=True,
            help=QUIET_HELP,
        ),
    ]
    if with_json:
        options.append(
            click.Option(
                ["--json"], is_flag=True, expose_value=False, callback=_root_flag("json"), is_eager=True, help=JSON_HELP
            )
        )
    return options


def write_usage(formatter: click.HelpFormatter, prog: str, pieces: list[str]) -> None:
    """The usage line, wrapped between words only: a metavar such as ENGINE/VERSION-VARIANT is never cut
    (click's own wrapping breaks at hyphens and inside long words). When the longest word does not fit
    beside the prefix, the lines after the first are indented by four instead."""
    import textwrap

    prefix = f"{'Usage: ':>{formatter.current_indent}}{prog} "
    width = max(formatter.width - formatter.current_indent, 20)
    args = " ".join(pieces)
    longest = max((len(w) for w in args.split()), default=0)
    if not args:
        formatter.write(prefix.rstrip(" ") + "\n")
        return
    first = prefix
    rest = " " * (len(prefix) if len(prefix) + longest <= width else formatter.current_indent + 4)
    wrapper = textwrap.TextWrapper(
        width, initial_indent=first, subsequent_indent=rest, break_long_words=False, break_on_hyphens=False
    )
    formatter.write(wrapper.fill(args) + "\n")


class Command(click.Command):
    """Every command also takes -v/--verbose and -q/--quiet after its name; its example is printed as written,
    never rewrapped, and its usage line is never cut inside a word."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.epilog:
            formatter.write_paragraph()
            for line in self.epilog.splitlines():
                formatter.write(f"{' ' * formatter.current_indent}  {line}\n")

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        write_usage(formatter, ctx.command_path, self.collect_usage_pieces(ctx))

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # click.Command's own (untyped) arguments, passed on
        super().__init__(*args, **kwargs)
        self.params.extend(anywhere_options(with_json=False))


class Group(click.Group):
    """Catches lockbuild's errors once, at the top: ERROR and TIP lines, a traceback only with --verbose."""

    command_class = Command

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        write_usage(formatter, ctx.command_path, self.collect_usage_pieces(ctx))

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,  # click's signature for main (extra arguments to make_context; the command's result)
    ) -> Any:
        """click's main, but a usage error under --json is a JSON object like every other error."""
        argv = list(sys.argv[1:] if args is None else args)
        prog_name = prog_name or PROG_NAME  # `python -I -m lockbuild` (the bootstrap's wrapper) is lockbuild too
        complete_var = complete_var or COMPLETE_VAR
        try:
            rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            if "--json" in argv:
                click.echo(json.dumps({"ok": False, "error": _usage_error(exc)}))
            if not standalone_mode:
                raise
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            if not standalone_mode:
                raise
            click.echo("Aborted!", err=True)
            sys.exit(1)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:  # whatever the command returns, as click.Group.invoke
        try:
            return super().invoke(ctx)
        except LockbuildError as exc:
            from lockbuild.text import for_terminal, mask_data, scrub

            obj = ctx.obj or {}
            secrets = obj.get("secrets", ())  # the settings' secrets (settings_of): never shown, whatever raised
            message, tip = scrub(exc.message, secrets), scrub(exc.tip, secrets) if exc.tip else exc.tip
            if obj.get("verbose"):
                click.echo(for_terminal(scrub(traceback.format_exc(), secrets)), err=True, nl=False)
            if obj.get("json"):
                click.echo(json.dumps(mask_data(exc.envelope(message=message, tip=tip))))
            click.echo(f"ERROR {for_terminal(message)}", err=True)
            if tip:
                click.echo(f"TIP {for_terminal(tip)}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("ERROR interrupted", err=True)
            ctx.exit(130)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # the last resort: a defect of lockbuild, never a traceback under --json
            _internal(ctx, exc)


def _internal(ctx: click.Context, exc: Exception) -> None:
    """An unexpected exception: one ERROR line (and a JSON object under --json) with exit 1; the
    traceback only with --verbose."""
    from lockbuild.text import for_terminal, mask_data, scrub

    obj = ctx.obj or {}
    secrets = obj.get("secrets", ())
    message = scrub(f"internal error: {type(exc).__name__}: {exc}", secrets)
    tip = "This is a defect of lockbuild; run the command again with --verbose and report the traceback."
    if obj.get("verbose"):
        click.echo(for_terminal(scrub(traceback.format_exc(), secrets)), err=True, nl=False)
    if obj.get("json"):
        error = {"type": type(exc).__name__, "kind": "internal", "message": message, "tip": tip, "exit_code": 1}
        click.echo(json.dumps({"ok": False, "error": mask_data(error), "kind": "internal"}))
    click.echo(f"ERROR {for_terminal(message)}", err=True)
    click.echo(f"TIP {for_terminal(tip)}", err=True)
    ctx.exit(1)


def _usage_error(exc: click.ClickException) -> dict[str, JSON]:
    """The JSON error object for a usage error: the same fields as lockbuild's own errors."""
    tip = None
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        tip = f"Run '{exc.ctx.command_path} --help' for the options and an example."
    return {"type": "UsageError", "message": exc.format_message(), "tip": tip, "exit_code": exc.exit_code}


def progress_of(ctx: click.Context) -> Progress:
    from lockbuild.progress import Progress

    progress = Progress(enabled=not (ctx.obj.get("json") or ctx.obj.get("quiet")))
    ctx.call_on_close(progress.close)  # its heartbeat thread ends with the command (tests run many in one process)
    return progress


def emit(ctx: click.Context, data: Mapping[str, JSON], text: str) -> None:
    """The result: JSON on stdout under --json, else ``text``; either way with credentials in URLs masked
    and (in text) every non-printable character escaped, whatever the text came from."""
    from lockbuild.text import for_terminal, mask_data

    if ctx.obj.get("json"):
        click.echo(json.dumps(mask_data({"ok": True, **data}), indent=2, default=str))
    else:
        click.echo(for_terminal(text))


def emit_warnings(ctx: click.Context, warnings: Iterable[str]) -> None:
    """Warnings (data on settings, plans and results) as lines on stderr; --json shows them in its object."""
    from lockbuild.text import for_terminal

    if not (ctx.obj.get("json") or ctx.obj.get("quiet")):
        for w in warnings:
            click.echo(f"warning: {for_terminal(w)}", err=True)


def settings_of(ctx: click.Context, allow_insecure_http: bool) -> Settings:
    """The builder's settings, read once from the flags and the environment (nothing below reads it)."""
    from lockbuild.settings import load

    settings = load(os.environ, home=Path.home(), allow_insecure_http=allow_insecure_http)
    ctx.find_root().ensure_object(dict)["secrets"] = settings.secrets()  # scrubbed from any error shown (Group.invoke)
    emit_warnings(ctx, settings.warnings)
    return settings


insecure_option = click.option(
    "--allow-insecure-http",
    is_flag=True,
    help="INSECURE: allow plain http to hosts other than this machine (also LOCKBUILD_ALLOW_INSECURE_HTTP=1); "
    "a warning is printed and no credentials are sent over it.",
)


def take_password() -> str | None:
    """LOCKBUILD_KEY_PASSWORD, removed from this process's environment as it is read, so that no child
    process (uv, a build backend) can inherit it."""
    password = os.environ.pop("LOCKBUILD_KEY_PASSWORD", None)
    if password:
        from lockbuild.settings import SettingsError
        from lockbuild.wire.rules import credential_problem, credential_tip

        why = credential_problem("LOCKBUILD_KEY_PASSWORD", password, as_is=False)
        if why is not None:
            raise SettingsError(why, tip=credential_tip("LOCKBUILD_KEY_PASSWORD"))
    return password


def password_reader(prompt: str = "Passphrase for the secret key") -> Callable[[], str]:
    def get() -> str:
        env = take_password()
        if env is not None:
            return env
        if not sys.stdin.isatty():
            raise SignatureError(
                "the secret key is encrypted and there is no terminal to ask for its passphrase.",
                tip="Set LOCKBUILD_KEY_PASSWORD, or run the command in a terminal.",
            )
        return str(click.prompt(prompt, hide_input=True))

    return get


DEFAULT_ROOT = Path("/opt/engines")
root_option = click.option(
    "--root",
    type=click.Path(path_type=Path, file_okay=False),
    envvar="LOCKBUILD_ROOT",
    default=DEFAULT_ROOT,
    show_default=True,
    help="Where engines live (or LOCKBUILD_ROOT); the same default for install, list, remove and doctor.",
)
json_option = click.option("--json", "as_json", is_flag=True, help=JSON_HELP)


def setup_output(ctx: click.Context, as_json: bool) -> None:
    ctx.ensure_object(dict)
    ctx.obj["json"] = ctx.obj.get("json") or as_json


build_option = click.option(
    "--build", "build_spec", metavar="VARIANT|VERSION-VARIANT", help="Only this build of the recipe (default: all)."
)
jobs_option = click.option(
    "--jobs",
    default=8,
    show_default=True,
    help="Files downloaded at once. A build packs files as they arrive, in order, and keeps at most JOBS x 128 "
    "MiB of files in flight (at least two): raise it where each connection gets little of the bandwidth.",
)


def _expires(_ctx: click.Context, param: click.Parameter, value: str | None) -> dt.datetime | None:
    if value is None:
        return None
    t = parse_time(value)
    if t is None:
        raise click.BadParameter(f"expected a time such as 2027-01-01T00:00:00Z, found {value!r}", param=param)
    if t.tzinfo is None:
        raise click.BadParameter("expected a time with a zone, e.g. 2027-01-01T00:00:00Z", param=param)
    if t <= dt.datetime.now(dt.UTC):
        raise click.BadParameter(f"{value} is already past; an expiry must be in the future", param=param)
    return t


expires_option = click.option(
    "--expires",
    callback=_expires,
    metavar="TIME",
    help="Signed expiry (RFC 3339, e.g. 2027-01-01T00:00:00Z): nodes refuse the bundle after it.",
)


fail_on_vulnerabilities_option = click.option(
    "--fail-on-vulnerabilities",
    is_flag=True,
    help="Fail (exit 7, no bundle left) when the OSV service (LOCKBUILD_OSV_URL) knows a vulnerability in a build.",
)
trust_option = click.option(
    "--trust",
    "trust_dir",
    type=click.Path(path_type=Path, file_okay=False),
    envvar="LOCKBUILD_TRUST_DIR",  # read here, in the CLI; the library takes the directory it is given
    help="Directory of trusted .pub keys (default: LOCKBUILD_TRUST_DIR, then /etc/lockbuild/keys).",
)
gpu_check_option = click.option(
    "--gpu-check",
    type=click.Choice(["auto", "require", "skip"]),
    default="auto",
    show_default=True,
    help="Run the GPU probe: auto = only where an NVIDIA driver is present.",
)
threshold_option = click.option("--threshold", type=click.IntRange(min=1), help="Distinct trusted signatures required.")
# The node's commands (verify, inspect, install, list) share these: the store ENGINE/VERSION-VARIANT is looked
# up in, and the models folder model bundles are installed in.
store_option = click.option(
    "--store",
    "store_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="A site store: where ENGINE/VERSION-VARIANT is looked up, and what completes a delta.",
)
models_option = click.option(
    "--models",
    "models_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="A models folder: the Hugging Face cache model bundles are installed in.",
)
# The site wing's commands (import, store, push, pull, delta, split) share these.
site_store_option = click.option(
    "--store", "store_dir", type=click.Path(path_type=Path, file_okay=False), required=True, help="The site store."
)
wait_option = click.option(
    "--wait", type=float, default=0.0, show_default=True, help="Seconds to wait for another import, pull or gc."
)
# install, remove and image share these: where the module files go (Lmod or Environment Modules).
modulefiles_option = click.option(
    "--modulefiles",
    "modulefiles_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Write (remove: delete) the engine's module file in DIR/ENGINE and move its default "
    "(default: $LOCKBUILD_MODULEFILES).",
)
modulefiles_format_option = click.option(
    "--modulefiles-format",
    type=click.Choice(["lua", "tcl"]),
    default="lua",
    show_default=True,
    help="lua: Lmod (DIR/ENGINE/VERSION-VARIANT.lua); tcl: Environment Modules (DIR/ENGINE/VERSION-VARIANT).",
)
