"""One trust port and one set of file primitives: the attacks on the site wing's copies, each met by
the one place that now holds the check. Each test fails when its check is removed."""

from __future__ import annotations

import dataclasses
import io
import json
import os
from pathlib import Path

import pytest
from conftest import REPO_ROOT, Keys, make_keys
from sitekit import cli, make_bundle

from lockbuild.bundle.manifest import MANIFEST
from lockbuild.bundle.write import BLOCK, RECORD, compressor, tar_header
from lockbuild.errors import IntegrityError, SignatureError
from lockbuild.site.delta import HEAD, DeltaHead
from lockbuild.site.sources import StoreBuild
from lockbuild.site.storage import Store
from lockbuild.trust import (
    Statement,
    digest_signed_file,
    evaluate,
    load_trust_store,
    open_source,
    sign_statement,
    signature_path,
)

pytestmark = pytest.mark.timeout(60)  # every FIFO case below must end, not hang


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("port-keys"))


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory, signer: Keys) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("port-bundles")
    return {v: make_bundle(out, [signer.secret], version=v) for v in ("1.0", "1.1")}


def _ok(*args: str | Path) -> dict[str, object]:
    r = cli(*args, "--json")
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


def _store(tmp_path: Path, bundles: dict[str, Path], signer: Keys, *versions: str) -> Path:
    store = tmp_path / "store"
    for v in versions or ("1.0",):
        _ok("import", bundles[v], "--trust", signer.trust, "--store", store)
    return store


# --- deleting by descriptor -------------------------------------------------------------------


def test_a_tmp_swapped_for_a_link_cannot_aim_gc_at_another_directory(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    """gc lists tmp/ by descriptor; it must delete by that descriptor too. Here tmp/ is swapped for a
    link to a victim directory after the store was opened: nothing of the victim's may go."""
    store_dir = _store(tmp_path, bundles, signer)
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    (victim / "import-1").write_text("precious")
    with Store(store_dir) as store:
        (store_dir / "tmp" / "import-1").mkdir()
        (store_dir / "tmp").rename(store_dir / "tmp.old")
        (store_dir / "tmp").symlink_to(victim)  # between the listing and the deletion
        store.gc()
    assert (victim / "import-1").read_text() == "precious"
    assert not (store_dir / "tmp.old" / "import-1").exists()  # what was listed is what went


def test_clear_tmp_deletes_by_descriptor_too(tmp_path: Path, bundles: dict[str, Path], signer: Keys) -> None:
    store_dir = _store(tmp_path, bundles, signer)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "staging-9").write_text("precious")
    with Store(store_dir) as store:
        (store_dir / "tmp" / "staging-9").write_text("left by a killed import")
        (store_dir / "tmp").rename(store_dir / "tmp.old")
        (store_dir / "tmp").symlink_to(victim)
        store.clear_tmp()
    assert (victim / "staging-9").read_text() == "precious"


# --- FIFOs: refused, never waited on ------------------------------------------------------------


def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


@pytest.mark.parametrize("where", ["blob", "manifest", "signatures", "mark"])
def test_a_fifo_in_the_store_is_refused_by_every_command(
    where: str, tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    store = _store(tmp_path, bundles, signer)
    build = store / "builds" / "toyengine" / "1.0-cpu"
    target = {
        "blob": sorted((store / "blobs" / "sha256").iterdir())[0],
        "manifest": build / "bundle.toml",
        "signatures": build / "bundle.toml.minisig",
        "mark": store / "lockbuild-store",
    }[where]
    _fifo(target)
    for args in (
        ("store", "verify", "--store", store),
        ("store", "list", "--store", store),
        ("store", "gc", "--store", store),
        ("verify", "toyengine/1.0-cpu", "--store", store, "--trust", signer.trust),
        ("install", "toyengine/1.0-cpu", "--store", store, "--trust", signer.trust, "--root", tmp_path / "root"),
        ("import", bundles["1.1"], "--store", store, "--trust", signer.trust),
    ):
        r = cli(*args, "--json")
        if r.exit_code == 0:  # a command that never needs that file may succeed; it must not hang
            continue
        doc = json.loads(r.stdout)
        assert doc["ok"] is False and "Traceback" not in r.output, (args, r.output)
        assert (
            "FIFO" in doc["error"]["message"]
            or "not a plain file" in doc["error"]["message"]
            or "not a regular file" in doc["error"]["message"]
        ), (args, doc)


@pytest.mark.parametrize("where", ["part list", "part", "minisig", "delta", "recipe"])
def test_a_fifo_where_a_file_from_outside_belongs_is_refused(
    where: str, tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    parts = tmp_path / "parts"
    listing = Path(str(_ok("split", bundles["1.0"], "--size", "300", "--out", parts)["part_list"]))
    deltas = tmp_path / "deltas"
    delta = Path(
        str(_ok("delta", bundles["1.1"], "--base", bundles["1.0"], "--out", deltas, "--trust", signer.trust)["delta"])
    )
    catalogue = tmp_path / "catalogue"
    catalogue.mkdir()
    if where == "part list":
        _fifo(listing)
        args: tuple[str | Path, ...] = ("verify", listing, "--trust", signer.trust)
    elif where == "part":
        _fifo(sorted(parts.glob("*.part*"))[1])
        args = ("import", listing, "--trust", signer.trust, "--store", tmp_path / "store")
    elif where == "minisig":
        _fifo(parts / (bundles["1.0"].name + ".minisig"))
        args = ("verify", listing, "--trust", signer.trust)
    elif where == "delta":
        _fifo(delta)
        args = ("verify", delta, "--trust", signer.trust)
    else:
        _fifo(catalogue / "engine.toml")
        args = ("doctor", "--catalogue", catalogue, "--root", tmp_path / "root", "--trust", signer.trust)
    r = cli(*args, "--json")
    doc = json.loads(r.stdout)
    text = json.dumps(doc)
    assert "Traceback" not in r.output
    assert "FIFO" in text, (where, r.output)


# --- a part list cannot fill the disk before the signatures are judged --------------------------


def test_a_part_listed_forty_times_is_refused_before_it_is_joined(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    from lockbuild.site.partlist import Part, PartList, read_part_list

    parts = tmp_path / "parts"
    listing_path = Path(str(_ok("split", bundles["1.0"], "--size", "100000", "--out", parts)["part_list"]))
    listing = read_part_list(listing_path)
    one = listing.parts[0]
    evil = PartList(
        listing.file, one.size * 40, listing.sha256, tuple(Part(one.name, one.size, one.sha256) for _ in range(40))
    )
    listing_path.write_bytes(evil.to_toml())
    store = tmp_path / "store"
    r = cli("import", listing_path, "--trust", signer.trust, "--store", store)
    assert (
        r.exit_code == 3
        and "its trusted signatures sign at most" in r.output
        and "nothing of it was joined" in r.output
    )
    assert [p for p in (store / "tmp").rglob("*") if p.is_file()] == []


# --- a store another user can write is refused ---------------------------------------------------


@pytest.mark.parametrize("inner", ["", "blobs", "tmp", "builds"])
def test_a_store_others_can_write_is_refused_naming_the_path(
    inner: str, tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    store = _store(tmp_path, bundles, signer)
    (store / inner).chmod(0o777 if inner else 0o757)
    r = cli("store", "list", "--store", store)
    assert r.exit_code == 1 and "refused the store" in r.output and "writable by its group or by others" in r.output
    assert (inner or str(store)) in r.output


# --- presence means checked; a re-import repairs ----------------------------------------------------


def test_re_importing_a_good_bundle_repairs_a_damaged_blob(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    store = _store(tmp_path, bundles, signer)
    blob = sorted((store / "blobs" / "sha256").iterdir())[0]
    data = bytearray(blob.read_bytes())
    data[0] ^= 1
    blob.chmod(0o644)
    blob.write_bytes(bytes(data))  # same size, other bytes
    assert cli("verify", "toyengine/1.0-cpu", "--store", store, "--trust", signer.trust).exit_code == 4
    _ok("import", bundles["1.0"], "--trust", signer.trust, "--store", store)
    assert cli("store", "verify", "--store", store).exit_code == 0
    assert _ok("verify", "toyengine/1.0-cpu", "--store", store, "--trust", signer.trust)["members"] == 5


def test_a_blob_of_another_size_is_not_present(tmp_path: Path, bundles: dict[str, Path], signer: Keys) -> None:
    store = _store(tmp_path, bundles, signer)
    blob = sorted((store / "blobs" / "sha256").iterdir())[0]
    blob.chmod(0o644)
    blob.write_bytes(blob.read_bytes()[:-1])
    with Store(store) as s, pytest.raises(IntegrityError, match="bytes; the manifest says"):
        s.has_blob(blob.name, blob.stat().st_size + 1)


# --- the signed manifest names what is installed ------------------------------------------------


def test_a_store_name_holding_another_signed_build_is_refused(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    """``install X --store`` must never install Y kept under X's name, though Y is signed."""
    store_dir = _store(tmp_path, bundles, signer, "1.0", "1.1")
    builds = store_dir / "builds" / "toyengine"
    for name in ("bundle.toml", "bundle.toml.minisig"):
        (builds / "1.0-cpu" / name).chmod(0o644)
        (builds / "1.0-cpu" / name).write_bytes((builds / "1.1-cpu" / name).read_bytes())
    with Store(store_dir) as store, pytest.raises(IntegrityError, match=r"another build \(toyengine/1.1-cpu\)"):
        open_source(StoreBuild(store, "toyengine/1.0-cpu"), load_trust_store(signer.trust))
    r = cli("install", "toyengine/1.0-cpu", "--store", store_dir, "--trust", signer.trust, "--root", tmp_path / "r")
    assert r.exit_code == 4 and "holds the signed manifest of another build" in r.output
    assert not (tmp_path / "r" / "toyengine" / "1.0-cpu").exists()


# --- a delta's members in the manifest's order, each once ---------------------------------------------


def _write_delta(path: Path, bundle: Path, order: list[int]) -> None:
    """A delta of ``bundle`` carrying its members ``order`` (indices into the manifest), as `delta` writes."""
    from lockbuild.bundle.read import read_head_raw
    from lockbuild.trust.sign import read_unverified

    head = read_head_raw(bundle)
    staging = path.parent / "members"
    read_unverified(bundle, dest=staging)
    m = head.manifest
    buf = io.BytesIO()
    z = compressor().stream_writer(buf, closefd=False)
    n = 0

    def add(name: str, data: bytes) -> None:
        nonlocal n
        for piece in (tar_header(name, len(data), m.serial), data, bytes(-len(data) % BLOCK)):
            z.write(piece)
            n += len(piece)

    add(HEAD, DeltaHead(m.bundle_name, "toyengine/1.0-cpu", len(m.members) - len(order)).to_toml())
    add(MANIFEST, head.manifest_bytes)
    for i in order:
        add(m.members[i].path, (staging / m.members[i].path).read_bytes())
    z.write(bytes(2 * BLOCK) + bytes(-(n + 2 * BLOCK) % RECORD))
    z.close()
    path.write_bytes(buf.getvalue())
    signature_path(path).write_bytes(signature_path(bundle).read_bytes())


@pytest.mark.parametrize(("order", "why"), [([3, 2], "refused member 'tools/"), ([2, 2], "appears twice")])
def test_delta_members_out_of_order_or_repeated_are_refused(
    order: list[int], why: str, tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    store = _store(tmp_path, bundles, signer)
    delta = tmp_path / "d" / (bundles["1.1"].name.removesuffix(".lbz") + ".delta.lbz")
    delta.parent.mkdir()
    _write_delta(delta, bundles["1.1"], order)
    r = cli("import", delta, "--trust", signer.trust, "--store", store)
    assert r.exit_code == 4 and why in r.output, r.output
    assert [p.name for p in (store / "builds" / "toyengine").iterdir()] == ["1.0-cpu"]


# --- only agreeing signatures count towards a threshold ---------------------------------------------


def test_a_signature_of_another_statement_does_not_count_towards_the_threshold(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    from lockbuild.bundle.read import read_head_raw
    from lockbuild.minisign import read_secret_key
    from lockbuild.trust.source import BundleFile

    bundle = tmp_path / bundles["1.0"].name
    bundle.write_bytes(bundles["1.0"].read_bytes())
    other = make_keys(tmp_path / "bob", "bob")
    trust = tmp_path / "trust-both"
    trust.mkdir()
    for k in (signer, other):
        (trust / k.public.name).write_bytes(k.public.read_bytes())
    d = digest_signed_file(bundle)
    m = read_head_raw(bundle).manifest
    good = Statement.of(m, name=bundle.name, sha256=d.sha256, size=d.size, expires=None, frames_sha256=d.frames_sha256)
    odd = dataclasses.replace(good, serial=good.serial + 1)  # the same file, other facts
    blocks = sign_statement(read_secret_key(signer.secret, lambda: ""), good, d.blake2b) + sign_statement(
        read_secret_key(other.secret, lambda: ""), odd, d.blake2b
    )
    signature_path(bundle).write_text(blocks)
    store = load_trust_store(trust)
    with pytest.raises(SignatureError, match="signs other facts than the counted signatures"):
        open_source(BundleFile(bundle), store, threshold=2)
    from lockbuild.minisign import parse_signatures

    ev = evaluate(parse_signatures(blocks), store, name=bundle.name, now=good.as_of, file=d, threshold=2)
    assert not ev.met and sum(v.counts for v in ev.verdicts) == 1


# --- every source works with every command that takes a bundle ------------------------------------------


def _sources(tmp_path: Path, bundles: dict[str, Path], signer: Keys) -> dict[str, tuple[str | Path, ...]]:
    parts = tmp_path / "parts"
    listing = _ok("split", bundles["1.1"], "--size", "300", "--out", parts)["part_list"]
    delta = _ok(
        "delta", bundles["1.1"], "--base", bundles["1.0"], "--out", tmp_path / "deltas", "--trust", signer.trust
    )["delta"]
    store = _store(tmp_path, bundles, signer, "1.0", "1.1")
    return {
        "lbz": (bundles["1.1"],),
        "parts": (str(listing),),
        "delta": (str(delta), "--store", store),
        "store": ("toyengine/1.1-cpu", "--store", store),
    }


CELLS = [
    (k, c)
    for c in ("verify", "inspect", "import")
    for k in ("lbz", "parts", "delta", "store")
    if (k, c) != ("store", "import")
]  # a store build is in a store already: push and pull move it


@pytest.mark.parametrize(("kind", "command"), CELLS)
def test_every_source_with_every_command(
    kind: str, command: str, tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    source = _sources(tmp_path, bundles, signer)[kind]
    if command == "import":
        other = tmp_path / "other"
        _ok("import", bundles["1.0"], "--store", other, "--trust", signer.trust)  # the base a delta needs
        done = _ok("import", source[0], "--store", other, "--trust", signer.trust)
        assert done["build"] == "toyengine/1.1-cpu"
        assert _ok("verify", "toyengine/1.1-cpu", "--store", other, "--trust", signer.trust)["members"] == 5
    elif command == "verify":
        done = _ok("verify", *source, "--trust", signer.trust)
        assert done["build"] == "toyengine/1.1-cpu" and done["members"] == 5 and done["absent"] == []
    else:
        done = _ok("inspect", *source)
        assert (done["engine"], done["version"]) == ("toyengine", "1.1")


def test_no_suffix_dispatch_and_no_cli_module_calls_another() -> None:
    """The CLI names sources only through site.sources.named_source; a command module imports of the
    other command modules only the shared helpers (``clikit``), the model options' glue (``models``) and the
    self-test's rendering (``selftest``, which ``build --self-test`` shows)."""
    root = REPO_ROOT / "lockbuild"
    for path in (root / "commands").glob("*.py"):
        text = path.read_text().replace("from lockbuild.commands.clikit import", "")
        text = text.replace("from lockbuild.commands.models import", "")
        text = text.replace("from lockbuild.commands.selftest import", "")
        for needle in (
            '.parts.toml")',
            '.delta.lbz")',
            "is_part_list(",
            "is_delta(",
            "from lockbuild.commands.",
        ):
            assert needle not in text, f"{path.name}: {needle}"


def test_only_the_one_trust_decision_exists() -> None:
    """One TrustedBundle, one extraction loop, and no trust decision in site/ (no policy call there)."""
    root = REPO_ROOT / "lockbuild"
    defs = [p for p in root.rglob("*.py") if "class TrustedBundle" in p.read_text()]
    assert [p.relative_to(root).as_posix() for p in defs] == ["trust/opener.py"]
    loops = [p for p in root.rglob("*.py") if "def extract(\n    manifest: Manifest," in p.read_text()]
    assert [p.relative_to(root).as_posix() for p in loops] == ["bundle/extract.py"]
    for p in (root / "site").glob("*.py"):
        text = p.read_text()
        for call in (
            "evaluate(",
            "check_complete(",
            "signed_manifest(",
            "check_manifest(",
            "check_dates(",
            "prove_manifest(",
            "verify_trusted_comment(",
        ):
            assert call not in text, f"site/{p.name} makes a trust decision: {call}"


# What makes the trust decision, and who may call it: the policy's judgements and the member loop are
# called from trust/ only (image/, site/, install/ and the commands reach them through open_source, decide
# and TrustedBundle.extract); the signer's unverified pass only from the signer.
DECISION_CALLS = {
    "evaluate",
    "check_complete",
    "check_not_larger",
    "check_dates",
    "signed_manifest",
    "check_manifest",
    "prove_manifest",
    "signed_sizes",
    "verify_trusted_comment",
    "check_signed_metadata",
}
MEMBER_LOOP = {"extract": "lockbuild.bundle.extract"}
ONLY_IN = {"read_unverified": "trust/sign.py"}


def _calls_and_imports(path: Path) -> list[tuple[str, int]]:
    """The names ``path`` calls (``f(…)``, or ``module.f(…)`` on a lockbuild module it imported) and the
    names it imports from lockbuild modules, each with its line."""
    import ast

    tree = ast.parse(path.read_text())
    modules = {
        a.asname or a.name.rsplit(".", 1)[-1]
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("lockbuild")
        for a in n.names
    }
    modules |= {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import)
        for a in n.names
        if a.name.startswith("lockbuild")
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                found.append((f.id, node.lineno))
            elif isinstance(f, ast.Attribute) and ast.unparse(f.value).split(".")[0] in modules:
                found.append((f.attr, node.lineno))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lockbuild"):
            found.extend((a.name, node.lineno) for a in node.names)
    return found


def test_the_trust_decision_and_the_member_loop_are_called_from_trust_only() -> None:
    root = REPO_ROOT / "lockbuild"
    bad = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        inside = rel.startswith(("trust/", "minisign/"))  # the policy itself, and the signature format's checks
        for name, line in _calls_and_imports(p):
            if name in DECISION_CALLS and not inside:
                bad.append(f"{rel}:{line} {name}: a trust decision outside trust/ (call open_source or decide)")
            elif (
                name in MEMBER_LOOP
                and not rel.startswith("trust/")
                and rel != "bundle/extract.py"
                and f"from {MEMBER_LOOP[name]} import" in p.read_text()
            ):
                bad.append(f"{rel}:{line} {name}: the member loop outside trust/ (use TrustedBundle.extract)")
            elif name in ONLY_IN and rel != ONLY_IN[name] and rel != "trust/__init__.py":
                bad.append(f"{rel}:{line} {name}: the signer's unverified reader outside {ONLY_IN[name]}")
    assert bad == []


def test_the_port_declares_everything_the_opener_reads() -> None:
    """The opener reads a source only through what ``Source``/``Signed`` declare (no ``getattr`` with a
    default that a new adapter would silently fall back to)."""
    root = REPO_ROOT / "lockbuild" / "trust"
    for p in root.glob("*.py"):
        for n, line in enumerate(p.read_text().splitlines(), 1):
            assert "getattr(source" not in line and "getattr(self.source" not in line, f"trust/{p.name}:{n}"


def test_the_scan_sees_a_decision_outside_trust(tmp_path: Path) -> None:
    """The scan above is real: a module that evaluates signatures itself, or loops over members, is seen."""
    planted = tmp_path / "verify.py"
    planted.write_text(
        "from lockbuild.trust.policy import evaluate\nfrom lockbuild.bundle.extract import extract\n"
        "import lockbuild.trust.policy as policy\n"
        "def f(b, s):\n    policy.check_dates(b, s)\n    return evaluate(b, s), extract(b, s)\n"
    )
    names = {n for n, _ in _calls_and_imports(planted)}
    assert {"evaluate", "extract", "check_dates"} <= names


def test_push_and_pull_make_their_trust_decision_in_the_registry_package() -> None:
    """push and pull judge the signatures in the same library place (registry/push.py, registry/artifact.py),
    never in the command: the command names the source and renders the result."""
    root = REPO_ROOT / "lockbuild"
    command = (root / "commands" / "registry.py").read_text()
    assert "open_source(" not in command and "decide(" not in command
    assert "open_source(" in (root / "registry" / "push.py").read_text()
    assert "open_source(" in (root / "registry" / "artifact.py").read_text()


@dataclasses.dataclass(frozen=True)
class _ToyIdentity:
    raw: bytes
    key_id: bytes

    @property
    def key_id_hex(self) -> str:
        return self.key_id.hex().upper()

    def to_text(self) -> str:
        return self.raw.hex()


@dataclasses.dataclass(frozen=True)
class _ToyBlock:
    key_id: bytes
    trusted_comment: str
    tag: bytes

    @property
    def key_id_hex(self) -> str:
        return self.key_id.hex().upper()


class _ToyScheme:
    """A second scheme, as small as a scheme can be: a block is an HMAC of the statement under the identity."""

    @staticmethod
    def tag(identity: _ToyIdentity, text: str) -> bytes:
        import hashlib
        import hmac

        return hmac.new(identity.raw, text.encode(), hashlib.sha256).digest()

    def refusal(self, block: object) -> str | None:
        return None

    def verify(self, block: _ToyBlock, identity: _ToyIdentity, *, file_blake2b: bytes | None) -> None:
        if block.tag != self.tag(identity, block.trusted_comment):
            raise SignatureError("the toy tag does not verify")


def test_the_policy_counts_identities_through_the_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy asks the scheme whom a block verifies as and counts identities: a scheme that is not
    minisign is judged by the same rules (one identity counts once; a trusted identity's bad block is a
    hard failure), so a second scheme is one adapter."""
    import datetime as dt

    from lockbuild.trust import build_store, policy

    toy = _ToyScheme()
    monkeypatch.setattr(policy, "SCHEME", toy)
    a, b = _ToyIdentity(b"a" * 32, b"A" * 8), _ToyIdentity(b"b" * 32, b"B" * 8)
    store = build_store([("a.pub", a), ("b.pub", b)], source="toy", policy="threshold = 2")
    text = Statement("x.lbz", "e", "1", "cpu", "0" * 64, 1, "1" * 64, 1).to_comment()
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def block(who: _ToyIdentity) -> _ToyBlock:
        return _ToyBlock(who.key_id, text, toy.tag(who, text))

    twice = evaluate([block(a), block(a)], store, name="x.lbz", now=now)
    assert not twice.met and [v.kind for v in twice.verdicts] == ["", "repeated"]
    both = evaluate([block(a), block(b)], store, name="x.lbz", now=now)
    assert both.met and [k.key_id for k in both.signers] == [a.key_id, b.key_id]
    forged = _ToyBlock(b.key_id, text, toy.tag(a, text))  # names b, made by a
    with pytest.raises(SignatureError, match="does not verify: the toy tag does not verify"):
        evaluate([block(a), forged], store, name="x.lbz", now=now)


def test_the_minisign_adapter_refuses_another_schemes_block() -> None:
    """A block or identity the adapter did not make is refused, never read as a minisign one."""
    from lockbuild.trust.scheme import SCHEME

    with pytest.raises(SignatureError, match="expected a minisign signature block, found _ToyBlock"):
        SCHEME.refusal(_ToyBlock(b"A" * 8, "lockbuild", b""))
