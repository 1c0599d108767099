"""What a person reads after a build: counts that agree with each other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import Keys

from lockbuild.cli import main


def test_packing_and_built_lines_count_the_same_files(
    env: object, keys: Keys, toy_recipe: Path, tmp_path: Path
) -> None:
    r = CliRunner().invoke(
        main,
        ["build", str(toy_recipe), "--key", str(keys.secret), "--out", str(tmp_path / "dist")],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.stderr
    packing = re.search(r"lockbuild: (?:downloading and )?packing: (\d+) file\(s\)", r.stderr)
    built = re.search(r"^built \S+ \([\d.]+ MB, (\d+) files with the manifest\)$", r.stdout, re.M)
    assert packing and built, (r.stdout, r.stderr)
    assert packing[1] == built[1]
    fetched = re.search(r"lockbuild: fetched (\d+) files?: (\d+) downloaded\b.*?, (\d+) from the cache", r.stderr)
    assert fetched, r.stderr
    assert int(fetched[1]) == int(fetched[2]) + int(fetched[3])


# Each refusal kind gets its own tip ---------------------------------------------------------------------
def _kinds() -> list[type[Exception]]:

    from lockbuild.errors import LockbuildError

    out: list[type[Exception]] = []
    todo: list[type[Exception]] = [LockbuildError]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


# What a tip must speak of for each kind of error (a new kind needs its own tip and a line here).
FITS = {
    "LockbuildError": "--verbose",
    "RecipeError": "recipe",
    "RemoteError": "network",
    "InsecureTransportError": "https",
    "ResolveError": "requirements",
    "FetchError": "cache",
    "IntegrityError": "sha256",
    "DamagedSource": "sha256",
    "SignatureError": "lockbuild verify",
    "PolicyError": "policy.toml",
    "InstallError": "untouched",
    "BusyError": "--wait",
    "PlatformError": "target",
    "FactsError": "LOCKBUILD_GPU_FACTS",
    "BinaryError": "cuobjdump",
    "SettingsError": "environment",
    "SandboxError": "bubblewrap",
    "SandboxTimeout": "bubblewrap",
    "StoreError": "store",
    "RegistryError": "registry",
    "ExportError": "store index",
    "TransferCut": "resumes",
    "AdvisoryDataError": "OpenVEX",
    "VulnerableError": "VEX",
}


def test_every_error_kind_has_a_tip_that_fits_it() -> None:
    from lockbuild.errors import LockbuildError, RecipeError

    kinds = _kinds()
    missing = sorted({k.__name__ for k in kinds} - set(FITS))
    assert missing == [], f"give each error kind a default_tip and a line in FITS: {missing}"
    for cls in kinds:
        tip = cls.default_tip  # type: ignore[attr-defined]
        assert tip and FITS[cls.__name__] in tip, (cls.__name__, tip)
    assert LockbuildError("x").tip == LockbuildError.default_tip  # an error raised without a tip carries it
    assert RecipeError("x", tip="own").tip == "own"
    own = [k for k in kinds if "default_tip" in vars(k)]
    tips = [vars(k)["default_tip"] for k in own]
    assert len(set(tips)) == len(tips), "two kinds share a tip: each says what fits it"


def test_a_renamed_bundle_is_told_its_signed_name(tmp_path: Path) -> None:
    from test_trust import make_bundle, sign, signer, trust_dir

    from lockbuild.trust import signature_path

    alice = signer(tmp_path / "keys", "alice")
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, alice)
    renamed = bundle.with_name("toyengine-1.0-cu128-x86_64-manylinux_2_28.lbz")
    bundle.rename(renamed)
    signature_path(bundle).rename(signature_path(renamed))
    r = CliRunner().invoke(main, ["verify", str(renamed), "--trust", str(trust_dir(tmp_path, alice))])
    assert r.exit_code == 3, r.output
    tip = next(line for line in r.stderr.splitlines() if line.startswith("TIP "))
    assert f"Use the bundle under the name it was signed as, {m.bundle_name}" in tip
    assert "signatures" not in tip.split("(")[0] and ".pub" not in tip


def test_an_untrusted_signer_is_told_to_add_the_pub(tmp_path: Path) -> None:
    from test_trust import make_bundle, sign, signer, trust_dir

    alice, bob = signer(tmp_path / "keys", "alice"), signer(tmp_path / "keys", "bob")
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, bob)
    r = CliRunner().invoke(main, ["verify", str(bundle), "--trust", str(trust_dir(tmp_path, alice))])
    assert r.exit_code == 3 and "TIP Add the publisher's .pub file to the trust directory" in r.stderr, r.output


def test_a_certificate_that_does_not_verify_says_to_set_ssl_cert_file(
    toy_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import http.server
    import ssl
    import threading

    from registrykit import self_signed

    cert, key = self_signed(tmp_path / "tls")
    httpd = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("LOCKBUILD_INDEX_URL", f"https://127.0.0.1:{httpd.server_address[1]}/simple")
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        r = CliRunner().invoke(main, ["lock", str(toy_recipe), "--out", str(tmp_path / "locks")])
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert r.exit_code == 1, r.output
    assert "CERTIFICATE_VERIFY_FAILED" in r.stderr and "TIP " in r.stderr and "SSL_CERT_FILE" in r.stderr, r.stderr


# Progress names what is really done ---------------------------------------------------------------------
def test_import_and_delta_say_what_they_do_not_unpacking(tmp_path: Path) -> None:
    from conftest import make_keys
    from sitekit import make_bundle

    signer = make_keys(tmp_path / "keys")
    old, new = (make_bundle(tmp_path / "b", [signer.secret], version=v) for v in ("1.0", "1.1"))
    store = tmp_path / "store"
    r = CliRunner().invoke(main, ["import", str(old), "--trust", str(signer.trust), "--store", str(store)])
    assert r.exit_code == 0, r.output
    assert re.search(r"^lockbuild: importing: \d+ file\(s\)", r.stderr, re.M), r.stderr
    assert "unpacking" not in r.stderr
    r = CliRunner().invoke(
        main, ["delta", str(new), "--base", str(old), "--out", str(tmp_path / "d"), "--trust", str(signer.trust)]
    )
    assert r.exit_code == 0, r.output
    assert re.search(r"^lockbuild: checking: \d+ file\(s\)", r.stderr, re.M), r.stderr
    assert "unpacking" not in r.stderr


def test_a_multi_build_build_says_which_build_it_packs(
    env: object, keys: Keys, toy_recipe: Path, tmp_path: Path
) -> None:
    text = toy_recipe.read_text()
    second = text[text.index("[[builds]]") :].replace('variant = "cpu"', 'variant = "cpu2"')
    toy_recipe.write_text(text + "\n" + second)
    r = CliRunner().invoke(main, ["build", str(toy_recipe), "--key", str(keys.secret), "--out", str(tmp_path / "d")])
    assert r.exit_code == 0, r.stderr
    lines = r.stderr.splitlines()
    first = lines.index("lockbuild: build 1 of 2: 1.0-cpu (x86_64-manylinux_2_28)")
    then = lines.index("lockbuild: build 2 of 2: 1.0-cpu2 (x86_64-manylinux_2_28)")
    assert any("packing" in x for x in lines[first:then]) and any("packing" in x for x in lines[then:])


def test_a_step_writing_one_file_shows_its_bytes_against_the_input(tmp_path: Path) -> None:
    import io
    import time

    from lockbuild.progress import Progress, written_of

    out = io.StringIO()
    p = Progress(out, heartbeat=0.05)
    image = tmp_path / "image.sqfs"
    p.phase("packing x.sqfs with mksquashfs", detail=written_of(image, 3_000_000))
    image.write_bytes(b"\0" * 1_500_000)
    deadline = time.monotonic() + 5
    while "1.5 MB written" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    p.finish()
    p.close()
    assert re.search(
        r"^lockbuild: packing x\.sqfs with mksquashfs: \d+ s, 1\.5 MB written, from 3\.0 MB of files$",
        out.getvalue(),
        re.M,
    ), out.getvalue()
    assert "still working" not in out.getvalue()
