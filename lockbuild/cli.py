"""The lockbuild command line: parse, call the library, render results and errors. Nothing else.

Exit codes: 0 ok, 1 failure, 2 usage, 3 signature policy not met, 4 integrity (digest, size,
layout), 5 another installer holds the engine's lock, 6 this machine cannot run the bundle (test).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from lockbuild import __version__
from lockbuild.errors import LockbuildError, SignatureError
from lockbuild.times import iso, parse_time

EPILOG_EXIT = (
    "Exit codes: 0 ok, 1 failure, 2 usage, 3 signature, 4 integrity, 5 busy, 6 cannot run the bundle here (test)."
)


def _verbose(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.ensure_object(dict)
        ctx.find_root().ensure_object(dict)["verbose"] = True
    return value


class _Command(click.Command):
    """Every command also takes -v/--verbose after its name; its example is printed as written, never rewrapped."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.epilog:
            formatter.write_paragraph()
            for line in self.epilog.splitlines():
                formatter.write(f"{' ' * formatter.current_indent}  {line}\n")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(
            click.Option(
                ["-v", "--verbose"],
                is_flag=True,
                expose_value=False,
                callback=_verbose,
                is_eager=True,
                help="Show a traceback with errors.",
            )
        )


class _Group(click.Group):
    """Catches lockbuild's errors once, at the top: ERROR and TIP lines, a traceback only with --verbose."""

    command_class = _Command

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """click's main, but a usage error under --json is a JSON object like every other error."""
        argv = list(sys.argv[1:] if args is None else args)
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

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LockbuildError as exc:
            from lockbuild.text import for_terminal, mask_data

            obj = ctx.obj or {}
            if obj.get("verbose"):
                click.echo(for_terminal(traceback.format_exc()), err=True, nl=False)
            if obj.get("json"):
                error = {"type": type(exc).__name__, "message": exc.message, "tip": exc.tip, "exit_code": exc.exit_code}
                click.echo(json.dumps({"ok": False, "error": mask_data(error)}))
            click.echo(f"ERROR {for_terminal(exc.message)}", err=True)
            if exc.tip:
                click.echo(f"TIP {for_terminal(exc.tip)}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("ERROR interrupted", err=True)
            ctx.exit(130)


def _usage_error(exc: click.ClickException) -> dict[str, Any]:
    """The JSON error object for a usage error: the same fields as lockbuild's own errors."""
    tip = None
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        tip = f"Run '{exc.ctx.command_path} --help' for the options and an example."
    return {"type": "UsageError", "message": exc.format_message(), "tip": tip, "exit_code": exc.exit_code}


def _progress(ctx: click.Context) -> Any:
    from lockbuild.progress import Progress

    return Progress(enabled=not ctx.obj.get("json"))


def _emit(ctx: click.Context, data: dict[str, Any], text: str) -> None:
    """The result: JSON on stdout under --json, else ``text``; either way with credentials in URLs masked
    and (in text) every non-printable character escaped, whatever the text came from."""
    from lockbuild.text import for_terminal, mask_data

    if ctx.obj.get("json"):
        click.echo(json.dumps(mask_data({"ok": True, **data}), indent=2, default=str))
    else:
        click.echo(for_terminal(text))


def _warn(ctx: click.Context, warnings: Any) -> None:
    """Warnings (data on settings, plans and results) as lines on stderr; --json shows them in its object."""
    from lockbuild.text import for_terminal

    if not ctx.obj.get("json"):
        for w in warnings:
            click.echo(f"warning: {for_terminal(w)}", err=True)


def _settings(ctx: click.Context, allow_insecure_http: bool) -> Any:
    """The builder's settings, read once from the flags and the environment (nothing below reads it)."""
    from lockbuild.settings import load

    settings = load(os.environ, home=Path.home(), allow_insecure_http=allow_insecure_http)
    _warn(ctx, settings.warnings)
    return settings


insecure_option = click.option(
    "--allow-insecure-http",
    is_flag=True,
    help="INSECURE: allow plain http to hosts other than this machine (also LOCKBUILD_ALLOW_INSECURE_HTTP=1); "
    "a warning is printed and no credentials are sent over it.",
)


def _take_password() -> str | None:
    """LOCKBUILD_KEY_PASSWORD, removed from this process's environment as it is read, so that no child
    process (uv, a build backend) can inherit it."""
    return os.environ.pop("LOCKBUILD_KEY_PASSWORD", None)


def _password(prompt: str = "Passphrase for the secret key") -> Callable[[], str]:
    def get() -> str:
        env = _take_password()
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
json_option = click.option("--json", "as_json", is_flag=True, help="Print a machine-readable JSON result on stdout.")


def _setup(ctx: click.Context, as_json: bool) -> None:
    ctx.ensure_object(dict)
    ctx.obj["json"] = ctx.obj.get("json") or as_json


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


# ---------------------------------------------------------------------------------------- builder
build_option = click.option(
    "--build", "build_spec", metavar="VARIANT|VERSION-VARIANT", help="Only this build of the recipe (default: all)."
)
jobs_option = click.option("--jobs", default=8, show_default=True, help="Files downloaded at once.")


def _lock_json(plan: Any) -> dict[str, Any]:
    return {
        "engine": plan.recipe.engine.name,
        "build": plan.build.id,
        "as_of": iso(plan.as_of),
        "python": plan.build.python,
        "platform": plan.build.platform,
        "lock_format": plan.lock.format,
        "packages": [
            {
                "name": f.name,
                "version": f.version,
                "file": f.filename,
                "sha256": f.sha256,
                "size": f.size,
                "url": f.url,
                "origin": f.origin,
            }
            for f in plan.lock.files
        ],
        "exclude_newer_package": {name: when or False for name, when in plan.build.exclude_newer_package},
        "extras": [{"path": e.path, "kind": e.kind, "sha256": e.sha256, "url": e.url} for e in plan.extras],
        "warnings": list(plan.warnings),
    }


@main.command(epilog="Example: lockbuild lock bundles/vllm.toml --build cu128 --out locks/")
@click.argument("recipe", type=click.Path(path_type=Path, dir_okay=False))
@build_option
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Directory for the locks.")
@insecure_option
@json_option
@click.pass_context
def lock(
    ctx: click.Context, recipe: Path, build_spec: str | None, out: Path, allow_insecure_http: bool, as_json: bool
) -> None:
    """Resolve a recipe's builds into hashed locks, as the index stood at each build's cut-off.

    Writes OUT/VERSION-VARIANT/ with requirements.txt (or pylock.toml for builds with a second index),
    extras.txt (the uv wheel and other bundled files, with sha256 and URL) and recipe.toml with as-of
    filled in. The primary index is LOCKBUILD_INDEX_URL (default PyPI).
    """
    _setup(ctx, as_json)
    from lockbuild.builder.output import write_plan_dir
    from lockbuild.builder.session import session
    from lockbuild.recipe import load_recipe

    settings = _settings(ctx, allow_insecure_http)
    r = load_recipe(recipe)
    results = []
    with session(settings, progress=_progress(ctx)) as s:
        plans = [s.planner.plan(r, b) for b in r.select(build_spec)]
    for plan in plans:
        write_plan_dir(plan, out)
        _warn(ctx, plan.warnings)
        results.append(_lock_json(plan))
    text = "\n".join(
        f"locked {res['engine']} {res['build']}: {len(res['packages'])} packages as of {res['as_of']} "
        f"-> {out / res['build'] / res['lock_format']}"
        for res in results
    )
    _emit(ctx, {"locks": results, "warnings": list(settings.warnings)}, text)


@main.command(epilog="Example: lockbuild fetch bundles/onnxruntime.toml --build cpu-py311 --out fetched/")
@click.argument("recipe", type=click.Path(path_type=Path, dir_okay=False))
@build_option
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Directory for the files.")
@jobs_option
@insecure_option
@json_option
@click.pass_context
def fetch(
    ctx: click.Context,
    recipe: Path,
    build_spec: str | None,
    out: Path,
    jobs: int,
    allow_insecure_http: bool,
    as_json: bool,
) -> None:
    """Lock, then download and verify every file a build needs (no bundle), for inspection.

    Files come through the content-addressed cache (LOCKBUILD_CACHE_DIR); each is checked against its
    sha256 and size. OUT/VERSION-VARIANT/ gets the lock, the recipe, wheels/, sdists/, source/, assets/, tools/.
    """
    _setup(ctx, as_json)
    from lockbuild.builder.output import write_plan_dir
    from lockbuild.builder.session import session
    from lockbuild.recipe import load_recipe

    settings = _settings(ctx, allow_insecure_http)
    r = load_recipe(recipe)
    results = []
    with session(settings, progress=_progress(ctx), jobs=jobs) as s:
        for b in r.select(build_spec):
            plan = s.planner.plan(r, b)
            _warn(ctx, plan.warnings)
            paths, report = s.fetch(plan)
            write_plan_dir(plan, out, paths)
            results.append(
                {
                    **_lock_json(plan),
                    "files": len(report.files),
                    "cached": report.cached,
                    "downloaded_bytes": report.downloaded_bytes,
                    "seconds": round(report.seconds, 3),
                }
            )
    text = "\n".join(
        f"fetched {x['engine']} {x['build']}: {x['files']} files ({x['cached']} cached) -> {out / x['build']}"
        for x in results
    )
    _emit(ctx, {"fetches": results, "warnings": list(settings.warnings)}, text)


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


@main.command(
    epilog="Example: lockbuild build bundles/onnxruntime.toml --build cpu-py311 --key release.key --out dist/"
)
@click.argument("recipe", type=click.Path(path_type=Path, dir_okay=False))
@build_option
@click.option("--key", type=click.Path(path_type=Path, dir_okay=False), required=True, help="minisign secret key.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Directory for bundles.")
@expires_option
@click.option("--threads", type=int, default=None, help="zstd workers (output is identical for any number).")
@jobs_option
@insecure_option
@click.option("--self-test", "self_test", is_flag=True,
              help="Then run `lockbuild test` on each bundle (trusting --trust, or else the key that signed it).")
@click.option("--trust", "trust_dir", type=click.Path(path_type=Path, file_okay=False),
              help="With --self-test: the trust directory to check the new bundles against.")  # fmt: skip
@json_option
@click.pass_context
def build(
    ctx: click.Context,
    recipe: Path,
    build_spec: str | None,
    key: Path,
    out: Path,
    expires: dt.datetime | None,
    threads: int | None,
    jobs: int,
    allow_insecure_http: bool,
    self_test: bool,
    trust_dir: Path | None,
    as_json: bool,
) -> None:
    """Lock, fetch, pack and sign: OUT/ENGINE-VERSION-VARIANT-PLATFORM.lbz and .lbz.minisig.

    The bundle is bit-for-bit reproducible: the same recipe gives the same bytes on any machine. If any
    step fails, OUT gets nothing. The key's passphrase comes from LOCKBUILD_KEY_PASSWORD or a prompt;
    the key is read only once every build is locked and fetched, just before signing.
    """
    _setup(ctx, as_json)
    from lockbuild.builder.pack import Written, fetch_and_write, sign
    from lockbuild.builder.session import session
    from lockbuild.minisign import read_secret_key
    from lockbuild.recipe import load_recipe

    settings = _settings(ctx, allow_insecure_http)
    password = _take_password()  # out of the environment before uv or anything else runs
    r = load_recipe(recipe)
    builds = r.select(build_spec)
    progress = _progress(ctx)
    results: list[dict[str, Any]] = []
    with session(settings, progress=progress, jobs=jobs) as s:
        plans = []
        for b in builds:  # every lock first: uv and the index's answers are done with before any packing
            plan = s.planner.plan(r, b)
            _warn(ctx, plan.warnings)
            plans.append(plan)
        written: list[Written] = []
        try:
            for plan in plans:  # fetched and packed at once, members in manifest order as they arrive
                written.append(fetch_and_write(plan, s.fetcher, out, threads=threads)[0])
        except BaseException:
            for w in written:
                w.discard()
            raise
    # The secret key is read only now: every build is locked and fetched, nothing from the index runs.
    try:
        secret = read_secret_key(key, (lambda: password) if password is not None else _password())
        signed = [(plan, sign(w, key=secret, expires=expires)) for plan, w in zip(plans, written, strict=True)]
    finally:
        for w in written:
            w.discard()
    for plan, packed in signed:
        results.append(
            {
                "bundle": str(packed.bundle),
                "signature": str(packed.signature),
                "sha256": packed.sha256,
                "size": packed.size,
                "members": len(packed.manifest.members),
                "signer": secret.key_id_hex,
                "as_of": iso(plan.as_of),
                "warnings": list(plan.warnings),
                "kept_signers": list(packed.kept_signers),
                "dropped_signers": list(packed.dropped_signers),
            }
        )

    def signatures_note(x: dict[str, Any]) -> str:
        note = ""
        if x["kept_signers"]:
            note += f"\n  kept the signatures of {', '.join(x['kept_signers'])}: the bundle is byte-identical"
        if x["dropped_signers"]:
            note += (f"\n  dropped the old signatures of {', '.join(x['dropped_signers'])}: the bundle changed,"
                     " so they must sign it again (lockbuild sign)")  # fmt: skip
        return note

    text = "\n".join(
        f"built {x['bundle']} ({x['size'] / 1e6:.1f} MB, {x['members'] + 1} files with the manifest)\n"
        f"  sha256 {x['sha256']}\n"
        f"  signed by {x['signer']} -> {x['signature']}" + signatures_note(x)
        for x in results
    )
    if self_test:  # issue 15: the report follows the build's own result
        from lockbuild.selftest.cli import run_after_build

        if not ctx.obj.get("json"):
            _emit(ctx, {}, text)
        run_after_build(ctx, [Path(x["bundle"]) for x in results], trust_dir, secret.public_key().to_text(),
                        built={"bundles": results, "warnings": list(settings.warnings)})  # fmt: skip
        return
    _emit(ctx, {"bundles": results, "warnings": list(settings.warnings)}, text)


@main.command(
    epilog="Example: lockbuild sign dist/onnxruntime-1.20.1-cpu-py311-x86_64-manylinux_2_28.lbz --key second.key"
)
@click.argument("bundle", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--key", type=click.Path(path_type=Path, dir_okay=False), required=True, help="minisign secret key.")
@click.option(
    "--trust",
    "trust_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also check the signatures already present against this trust directory before signing.",
)
@expires_option
@json_option
@click.pass_context
def sign(
    ctx: click.Context, bundle: Path, key: Path, trust_dir: Path | None, expires: dt.datetime | None, as_json: bool
) -> None:
    """Add a signature to a bundle (appended to BUNDLE.minisig; the first stays minisign-verifiable).

    The whole bundle is checked first (every member against its manifest), and with --trust the
    signatures already present against that trust directory: a damaged bundle is refused, not signed.
    Signing again with a key that already signed replaces that key's signature in place, which is
    how an expiry is renewed.
    """
    _setup(ctx, as_json)
    from lockbuild.minisign import read_secret_key
    from lockbuild.trust import load_store, sign_bundle

    store = load_store(trust_dir) if trust_dir is not None else None
    secret = read_secret_key(key, _password())
    res = sign_bundle(bundle, secret, expires=expires, store=store, progress=_progress(ctx))
    verb = "re-signed" if res.replaced else "signed"
    lines = [f"{verb} {bundle.name} with key {res.signer} -> {res.signature}",
             f"  checked {res.members} members against the manifest (sha256 {res.sha256})"]  # fmt: skip
    if res.existing is not None:
        lines += [f"  existing signature {v.index} (key {v.key_id}): " + ("counts" if v.counts else v.reason)
                  for v in res.existing.verdicts]  # fmt: skip
    _emit(ctx, res.to_json(), "\n".join(lines))


@main.command(epilog="Example: lockbuild keygen ~/lockbuild-keys/release  (writes release.key and release.pub there)")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--no-password", is_flag=True, help="Write the secret key unencrypted (for CI signers with a vault).")
@click.option("--force", is_flag=True, help="Write the secret key even where a git work tree would track it.")
@json_option
@click.pass_context
def keygen(ctx: click.Context, path: Path, no_password: bool, force: bool, as_json: bool) -> None:
    """Write a minisign-compatible key pair: PATH.key (mode 0600) and PATH.pub."""
    _setup(ctx, as_json)
    from lockbuild.minisign import read_public_key, write_keypair
    from lockbuild.minisign.keyfiles import unignored_in_git

    secret_file = path.parent / (path.name + ".key")
    repo = unignored_in_git(secret_file)
    if repo is not None and not force:
        raise LockbuildError(
            f"{secret_file} would be inside the git work tree {repo}, and git does not ignore it: a secret key"
            " there is one `git add` away from being published.",
            tip="Write it outside the repository (e.g. ~/lockbuild-keys/release), ignore *.key in the"
            " repository, or pass --force.",
        )

    def nonempty(value: str) -> str:
        if not value:
            raise click.UsageError("an empty passphrase is not allowed (pass --no-password for an unencrypted key)")
        return value

    password = None
    if not no_password:
        password = _take_password()
        if password is None:
            if not sys.stdin.isatty():
                raise SignatureError(
                    "no terminal to ask for a passphrase.", tip="Set LOCKBUILD_KEY_PASSWORD, or pass --no-password."
                )
            key_file = path.parent / (path.name + ".key")
            password = str(click.prompt(f"Passphrase for the new key {key_file}", hide_input=True, default="",
                                        show_default=False, confirmation_prompt=True, value_proc=nonempty))  # fmt: skip
    secret_path, public_path = write_keypair(path, password=password)
    pub = read_public_key(public_path)
    _emit(
        ctx,
        {"secret_key": str(secret_path), "public_key": str(public_path), "key_id": pub.key_id_hex},
        f"wrote {secret_path} (keep it secret) and {public_path} (key id {pub.key_id_hex})",
    )


# ------------------------------------------------------------------------------------------- node
trust_option = click.option(
    "--trust",
    "trust_dir",
    type=click.Path(path_type=Path, file_okay=False),
    envvar="LOCKBUILD_TRUST_DIR",  # read here, in the CLI; the library takes the directory it is given
    help="Directory of trusted .pub keys (default: LOCKBUILD_TRUST_DIR, then /etc/lockbuild/keys).",
)
threshold_option = click.option("--threshold", type=click.IntRange(min=1), help="Distinct trusted signatures required.")


@main.command(epilog="Example: lockbuild verify demo.lbz --trust /etc/lockbuild/keys --threshold 2")
@click.argument("bundle", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@trust_option
@threshold_option
@json_option
@click.pass_context
def verify(ctx: click.Context, bundle: Path, trust_dir: Path | None, threshold: int | None, as_json: bool) -> None:
    """Check a bundle's signatures, then every member against its manifest. Exit 0 only if all hold."""
    _setup(ctx, as_json)
    if bundle.name.endswith(".delta.lbz"):  # the site wing's delta bundles
        from lockbuild.site.cli import delta_verify

        delta_verify(ctx, bundle, trust_dir, threshold)
        return
    from lockbuild.trust import load_store, verify_bundle
    from lockbuild.trust import trust_dir as resolve_trust_dir

    store = load_store(resolve_trust_dir(trust_dir))
    res = verify_bundle(bundle, store, threshold=threshold, progress=_progress(ctx))
    _emit(
        ctx,
        res.to_json(),
        f"OK {bundle.name}: signed by {', '.join(res.signers)}; {res.members} members match the signed manifest",
    )


@main.command(epilog="Example: lockbuild inspect demo.lbz --json")
@click.argument("bundle", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@json_option
@click.pass_context
def inspect(ctx: click.Context, bundle: Path, as_json: bool) -> None:
    """Show a bundle's engine, build, target, as-of, signers and file table (signatures NOT checked)."""
    _setup(ctx, as_json)
    if bundle.name.endswith(".delta.lbz"):  # the site wing's delta bundles
        from lockbuild.site.cli import delta_inspect

        delta_inspect(ctx, bundle)
        return
    from lockbuild.bundle.read import read_head
    from lockbuild.errors import SignatureError as SigErr
    from lockbuild.trust import read_signatures, signature_path

    manifest, _ = read_head(bundle)
    try:
        sigs = [
            {"key_id": s.key_id_hex, "trusted_comment": s.trusted_comment}
            for s in read_signatures(signature_path(bundle))
        ]
    except SigErr:
        sigs = []
    data = {
        "engine": manifest.engine,
        "version": manifest.version,
        "variant": manifest.variant,
        "python": manifest.python,
        "platform": manifest.platform,
        "as_of": iso(manifest.as_of),
        "serial": manifest.serial,
        "builder": {"lockbuild": manifest.lockbuild_version, "uv": manifest.uv_version},
        "exclude_newer_package": {name: when or False for name, when in manifest.exclude_newer_package},
        "signatures": sigs,
        "unpacked_size": manifest.unpacked_size,
        "install": manifest.install.to_json(),
        "files": [
            {"path": m.path, "size": m.size, "sha256": m.sha256, "kind": m.kind, "origin": m.origin}
            for m in manifest.members
        ],
    }
    lines = [
        f"{manifest.engine} {manifest.version} ({manifest.variant}) "
        f"for Python {manifest.python} on {manifest.platform}",
        f"as of {data['as_of']}, built by lockbuild {manifest.lockbuild_version} with uv {manifest.uv_version}",
        f"signatures (not checked here; use verify): {', '.join(s['key_id'] for s in sigs) or 'none'}",
        *(
            f"exclude-newer-package: {name} = {when or 'false (no cut-off)'}"
            for name, when in manifest.exclude_newer_package
        ),
        *(f"install: {line}" for line in manifest.install.summary()),
        *(
            f"interpreter: Python {manifest.python}, {m.path} (sha256 {m.sha256[:16]}…, from {m.origin})"
            for m in manifest.members
            if m.kind == "interpreter"
        ),
        *(
            [
                "build dependencies (the node builds the sdists offline from these only): "
                + ", ".join(m.path.rsplit("/", 1)[-1] for m in manifest.members if m.kind == "build-dep")
            ]
            if any(m.kind == "build-dep" for m in manifest.members)
            else []
        ),
        *(
            f"built on the builder: {m.path} from the sdist beside it ({m.origin}), with the build dependencies "
            "pinned in lock/build-requirements.txt"
            for m in manifest.members
            if m.kind == "wheel" and m.path.startswith("sdists/")
        ),
        f"{len(manifest.members)} files, {manifest.unpacked_size / 1e6:.1f} MB unpacked:",
    ]
    lines += [f"  {m.size:>14,}  {m.kind:<7} {m.path}" for m in manifest.members]
    _emit(ctx, data, "\n".join(lines))


@main.command(epilog="Example: lockbuild install demo.lbz --root /opt/engines --trust /etc/lockbuild/keys")
@click.argument("bundle", metavar="BUNDLE|ENGINE/VERSION-VARIANT", type=click.Path(path_type=Path, dir_okay=False))
@root_option
@click.option("--store", "store_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Install ENGINE/VERSION-VARIANT from this site store (see `lockbuild import`, `pull`).")  # fmt: skip
@trust_option
@threshold_option
@click.option("--python", "python", type=click.Path(path_type=Path, dir_okay=False),
              help="Interpreter to use (default: the bundle's own, else pythonX.Y on PATH).")  # fmt: skip
@click.option(
    "--gpu-check",
    type=click.Choice(["auto", "require", "skip"]),
    default="auto",
    show_default=True,
    help="Run the GPU probe: auto = only where an NVIDIA driver is present.",
)
@click.option("--force", is_flag=True, help="Reinstall even if this bundle is already installed.")
@click.option("--allow-downgrade", is_flag=True, help="Accept a bundle older (lower serial) than the installed one.")
@click.option("--wait", type=float, default=0.0, show_default=True, help="Seconds to wait for another installer.")
@json_option
@click.pass_context
def install(
    ctx: click.Context,
    bundle: Path,
    root: Path,
    store_dir: Path | None,
    trust_dir: Path | None,
    threshold: int | None,
    python: Path | None,
    gpu_check: str,
    force: bool,
    allow_downgrade: bool,
    wait: float,
    as_json: bool,
) -> None:
    """Install a signed bundle offline into ROOT/ENGINE/VERSION-VARIANT, atomically.

    Signatures are checked before anything is unpacked; every file is checked against the manifest;
    the environment is built under a .partial name with the bundled uv (no index, --require-hashes),
    the engine's verify command and GPU probe run, and only then is it swapped into place. A failure
    leaves the previous install untouched.
    """
    _setup(ctx, as_json)
    from lockbuild.install.installer import Installer, InstallOptions

    opts = InstallOptions(
        root=root,
        trust_dir=trust_dir,
        python=python,
        gpu_check=gpu_check,  # type: ignore[arg-type]
        force=force,
        allow_downgrade=allow_downgrade,
        threshold=threshold,
        wait=wait,
        environ=dict(os.environ),  # the installer passes only allow-listed names on to uv and the engine
    )
    installer = Installer(opts, progress=_progress(ctx))
    if store_dir is not None:  # the site wing's store: no network code either
        import time

        from lockbuild.site.storeopen import open_store_build

        opened = open_store_build(store_dir, str(bundle), trust=trust_dir, threshold=threshold,
                                  progress=installer.progress)  # fmt: skip
        result = installer.install_opened(opened, time.monotonic())
    elif not bundle.exists():
        raise click.BadParameter(f"Path {str(bundle)!r} does not exist.", param_hint="'BUNDLE'")
    elif bundle.name.endswith(".parts.toml"):  # `lockbuild split`'s part list: joined in TMPDIR, each part checked
        import tempfile

        from lockbuild.site.parts import join_to

        with tempfile.TemporaryDirectory(prefix="lockbuild-parts-") as tmp:
            result = installer.install(join_to(bundle, Path(tmp)))
    else:
        result = installer.install(bundle)
    verb = "installed" if result.status == "installed" else "already installed"
    _emit(ctx, result.to_json(), f"{verb}: {result.engine} {result.version}-{result.variant} at {result.path}")


@main.command("list", epilog="Example: lockbuild list --root /opt/engines --json")
@root_option
@json_option
@click.pass_context
def list_(ctx: click.Context, root: Path, as_json: bool) -> None:
    """List installed engines with version, variant, installed time and bundle digest."""
    _setup(ctx, as_json)
    from lockbuild.install.marker import list_installed

    rows = list_installed(root.absolute())
    data = [{"path": str(p), **m.to_json()} for p, m in rows]
    text = (
        "\n".join(
            f"{m.engine:<16} {m.version}-{m.variant:<12} installed {m.installed}  sha256 {m.bundle_sha256[:16]}…  {p}"
            + "".join(f"\n    env {k}={v}" for k, v in m.env)
            for p, m in rows
        )
        or f"no engines under {root}"
    )
    _emit(ctx, {"root": str(root.absolute()), "installed": data}, text)


@main.command(epilog="Example: lockbuild remove vllm 0.11.0-cu128 --root /opt/engines")
@click.argument("engine")
@click.argument("build_id", metavar="VERSION-VARIANT")
@root_option
@click.option("--wait", type=float, default=0.0, show_default=True, help="Seconds to wait for another installer.")
@json_option
@click.pass_context
def remove(ctx: click.Context, engine: str, build_id: str, root: Path, wait: float, as_json: bool) -> None:
    """Remove an installed engine environment."""
    _setup(ctx, as_json)
    from lockbuild.install.installer import remove as do_remove

    path = do_remove(root, engine, build_id, wait=wait)
    _emit(ctx, {"removed": str(path)}, f"removed {path}")


@main.command(epilog="Example: lockbuild doctor --root /opt/engines --catalogue bundles/ --json")
@root_option
@click.option(
    "--catalogue",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("bundles"),
    show_default=True,
    help="Directory of recipes (*.toml) and bundles (*.lbz) to check against this node.",
)
@trust_option
@json_option
@click.pass_context
def doctor(ctx: click.Context, root: Path, catalogue: Path, trust_dir: Path | None, as_json: bool) -> None:
    """Report what this node has: NVIDIA driver and GPUs, Pythons, free space, trusted keys, installed
    engines, and which catalogue builds fit it (and why the others don't)."""
    _setup(ctx, as_json)
    from lockbuild.install.doctor import examine, render
    from lockbuild.trust import trust_dir as resolve_trust_dir

    candidates, problems = _catalogue(catalogue)
    report = examine(root, candidates=candidates, problems=problems, trust=resolve_trust_dir(trust_dir))
    _emit(ctx, report, render(report))


def _catalogue(directory: Path) -> tuple[list[Any], list[str]]:
    """Doctor's candidates: each build of each recipe, and each bundle's signed needs (read, not verified)."""
    from lockbuild.bundle.instructions import GpuNeeds
    from lockbuild.bundle.read import read_head
    from lockbuild.install.doctor import Candidate
    from lockbuild.install.fit import Needs, space_needed
    from lockbuild.recipe import load_recipe

    if not directory.is_dir():
        return [], [f"no catalogue directory {directory.absolute()}; pass --catalogue DIR"]
    out: list[Any] = []
    problems: list[str] = []
    for path in sorted(directory.glob("*.toml")):
        try:
            recipe = load_recipe(path)
        except LockbuildError as exc:
            problems.append(exc.message)
            continue
        for b in recipe.builds:
            gpu = GpuNeeds(b.gpu.min_capability, b.gpu.min_driver) if b.gpu else None
            needs = Needs(b.python, b.platform, gpu, space_needed(0, b.free_gb or 0))
            out.append(Candidate(path.name, recipe.engine.name, b.id, needs))
    for path in sorted(directory.glob("*.lbz")):
        try:
            manifest, _ = read_head(path)
        except LockbuildError as exc:
            problems.append(f"{path.name}: {exc.message}")
            continue
        out.append(Candidate(path.name, manifest.engine, f"{manifest.version}-{manifest.variant}", Needs.of(manifest)))
    return out, problems


from lockbuild.site.cli import register as _register_site  # noqa: E402  (the site wing's commands)

_register_site(main)

from lockbuild.selftest.cli import register as _register_selftest  # noqa: E402  (lockbuild test, issue 15)

_register_selftest(main)

if __name__ == "__main__":  # pragma: no cover
    main()
