"""The self-test's verdict against an engine that attacks the tracer: a seccomp filter of its own (a
user-notification listener that hides its calls from strace, or any filter at all), and name look-ups the
verdict must read from the bytes sent (a native query after a Python one, sendmsg/sendmmsg/write/writev,
a query that cannot be read). Run as root and as uid 65534 (scripts/test-as-nobody)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import PLATFORM, PY, Keys, day, uv_wheel
from servers import FakeServer, make_wheel

from lockbuild.cli import main
from lockbuild.selftest import seccomp
from lockbuild.selftest.dns import DnsStream, question
from lockbuild.selftest.tracelog import parse

ENGINE = """\
import ctypes
import os
import socket
import struct
import sys
import threading

libc = ctypes.CDLL(None, use_errno=True)


class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Msg(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(Iov)),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class MMsg(ctypes.Structure):
    _fields_ = [("hdr", Msg), ("len", ctypes.c_uint)]


KEEP = []


def _buf(data):
    b = ctypes.create_string_buffer(data, len(data))
    KEEP.append(b)
    return ctypes.cast(b, ctypes.c_void_p)


def _program(*ins):
    code = b"".join(struct.pack("=HBBI", *i) for i in ins)
    return Fprog(len(ins), _buf(code))


def query(name):
    labels = b"".join(bytes([len(x)]) + x.encode() for x in name.split("."))
    return bytes.fromhex("123401000001000000000000") + labels + b"\\x00\\x00\\x01\\x00\\x01"


RESOLVER = socket.AF_INET.to_bytes(2, "little") + (53).to_bytes(2, "big") + socket.inet_aton("127.0.0.1") + bytes(8)


def _iov(data):
    return ctypes.pointer(Iov(_buf(data), len(data)))


def notify():  # connect answered by a user-notification listener of its own: strace never stops on it
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    prog = _program((0x20, 0, 0, 0), (0x15, 0, 1, 42), (0x06, 0, 0, 0x7FC00000), (0x06, 0, 0, 0x7FFF0000))
    fd = libc.syscall(317, 1, 8, ctypes.byref(prog))  # seccomp(SET_MODE_FILTER, FLAG_NEW_LISTENER)
    if fd < 0:
        print("listener refused:", os.strerror(ctypes.get_errno()))
    else:
        print("listener installed")

        def answer():
            while True:
                req = ctypes.create_string_buffer(80)
                if libc.ioctl(fd, 0xC0502100, req) != 0:  # SECCOMP_IOCTL_NOTIF_RECV
                    return
                resp = ctypes.create_string_buffer(struct.pack("=QqiI", struct.unpack_from("=Q", req)[0], 0, 0, 1), 24)
                libc.ioctl(fd, 0xC0182101, resp)  # SECCOMP_IOCTL_NOTIF_SEND, SECCOMP_USER_NOTIF_FLAG_CONTINUE

        threading.Thread(target=answer, daemon=True).start()
    try:
        socket.create_connection(("10.255.255.21", 91), timeout=2).close()
    except OSError as exc:
        print("connect:", exc)


def filters():  # harmless filters, one by seccomp and one by prctl: the self-test cannot vouch for them
    libc.prctl(38, 1, 0, 0, 0)
    allow = _program((0x06, 0, 0, 0x7FFF0000))
    print("seccomp", libc.syscall(317, 1, 0, ctypes.byref(allow)), "prctl", libc.prctl(22, 2, ctypes.byref(allow), 0, 0))


def lookups():  # a Python look-up of an allowed name (the watch hook notes it), then native queries of others
    try:
        socket.getaddrinfo("allowed.example", 443)
    except OSError:
        pass
    addr = _buf(RESOLVER)
    fd = libc.socket(2, 2, 0)  # connected: send (sendto with no address), write, writev
    libc.connect(fd, addr, 16)
    for name, send in (("evil-send.example", lambda q: libc.send(fd, _buf(q), len(q), 0)),
                       ("evil-write.example", lambda q: libc.write(fd, _buf(q), len(q))),
                       ("evil-writev.example", lambda q: libc.writev(fd, _iov(q), 1))):
        send(query(name))
    fd = libc.socket(2, 2, 0)  # not connected: msg_name's inet_addr("127.0.0.1") is the first string
    hdr = Msg(addr, 16, _iov(query("evil-sendmsg.example")), 1, None, 0, 0)
    libc.sendmsg(fd, ctypes.byref(hdr), 0)
    two = (MMsg * 2)(MMsg(Msg(addr, 16, _iov(query("allowed.example")), 1, None, 0, 0), 0),
                     MMsg(Msg(addr, 16, _iov(query("evil-sendmmsg.example")), 1, None, 0, 0), 0))
    libc.sendmmsg(fd, two, 2, 0)
    junk = b"\\x12\\x34\\x01\\x00\\x00\\x02" + bytes(6) + b"\\x03bad\\x00"  # two questions, cut short: unreadable
    libc.sendto(fd, _buf(junk), len(junk), 0, addr, 16)
    print("looked up")


def bigmmsg():  # one sendmmsg whose strace line is over 16 MiB: 69 messages to loopback, the last one far
    n, iovs, size = 70, 64, 1000
    data = _buf(b"a" * size)
    vec = (Iov * iovs)(*[Iov(data, size) for _ in range(iovs)])
    here, far = (_buf(RESOLVER[:2] + (9).to_bytes(2, "big") + socket.inet_aton(h) + bytes(8))
                 for h in ("127.0.0.1", "10.255.255.23"))
    msgs = (MMsg * n)(*[MMsg(Msg(far if i == n - 1 else here, 16, vec, iovs, None, 0, 0), 0) for i in range(n)])
    print("sendmmsg", libc.sendmmsg(libc.socket(2, 2, 0), msgs, n, 0))


def allowed():
    try:
        socket.getaddrinfo("allowed.example", 443)
    except OSError:
        pass
    print("looked up")


def main():
    mode = sys.argv[1:] or ["--version"]
    {"--notify": notify, "--filters": filters, "--lookups": lookups, "--allowed": allowed, "--bigmmsg": bigmmsg}.get(
        mode[0], lambda: print("attacker 1.0"))()
"""

RECIPE = f'''\
[engine]
name = "attacker"
pypi = "attacker"
binary = "attacker"
verify = ["attacker", "--version"]
smoke = ["attacker", "{{mode}}"]
allow-network = ["allowed.example"]

[[builds]]
version = "1.0"
variant = "{{variant}}"
python = "{PY}"
platform = "{PLATFORM}"
requirements = ["attacker==1.0"]
'''


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def _can_sandbox() -> bool:
    try:
        from lockbuild.proc import sandbox

        sandbox.check_available()
    except Exception:  # any failure: this machine cannot run the sandbox
        return False
    return True


needs_selftest = pytest.mark.skipif(
    not _can_sandbox() or shutil.which("strace") is None or platform.machine() != "x86_64",
    reason="needs the bubblewrap sandbox, strace, and x86-64 (the engine's filters use its system-call numbers)",
)


@pytest.fixture(scope="module")
def attackers(
    blank_server: FakeServer, keys: Keys, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Path]]:
    s = blank_server
    s.reset()
    s.publish(*uv_wheel(), uploaded=day(1))
    s.publish(
        *make_wheel("attacker", "1.0", modules={"attacker/__init__.py": ENGINE}, scripts={"attacker": "attacker:main"}),
        uploaded=day(1),
    )
    tmp = tmp_path_factory.mktemp("attacker")
    built = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_INDEX_URL", s.index_url())
        mp.setenv("LOCKBUILD_CACHE_DIR", str(tmp / "cache"))
        for variant in ("notify", "filters", "lookups", "allowed", "bigmmsg"):
            recipe = tmp / f"{variant}.toml"
            recipe.write_text(RECIPE.format(mode=f"--{variant}", variant=variant))
            code, out, err = cli("build", str(recipe), "--key", str(keys.secret), "--out", str(tmp / variant), "--json")
            assert code == 0, err
            built[variant] = Path(json.loads(out)["bundles"][0]["bundle"])
        yield built


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path / f"lockbuild-selftest-{os.geteuid()}"


def selftest(bundle: Path, keys: Keys) -> tuple[int, dict[str, Any]]:
    code, out, _ = cli("test", str(bundle), "--trust", str(keys.trust), "--json")
    return code, json.loads(out)


def smoke(data: dict[str, Any]) -> str:
    return str(next(s["detail"] for s in data["self_test"][0]["steps"] if s["name"] == "smoke"))


def refused(data: dict[str, Any]) -> list[tuple[str, str]]:
    return [(a["event"], a["host"]) for a in data["self_test"][0]["attempts"] if a["verdict"] == "refused"]


# --- the tracer cannot be switched off ----------------------------------------------------------------


@needs_selftest
def test_a_listener_of_the_engines_own_is_refused_and_its_connect_is_seen(
    attackers: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data = selftest(attackers["notify"], keys)
    assert "listener refused: Operation not permitted" in smoke(data), data  # the sandbox's own filter
    assert code == 1 and data["self_test"][0]["verdict"] == "failed"
    assert ("connect", "10.255.255.21") in refused(data)
    assert list(private_tmp.iterdir()) == []


@needs_selftest
def test_any_filter_the_engine_installs_fails_the_verdict(
    attackers: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data = selftest(attackers["filters"], keys)
    report = data["self_test"][0]
    assert "seccomp 0 prctl 0" in smoke(data)  # both were installed (no listener: the sandbox lets them in)
    assert code == 1 and report["verdict"] == "failed" and report["attempts"] == []
    [problem] = report["problems"]
    assert problem.startswith("the engine installed a seccomp filter: this self-test cannot vouch for it")
    assert "the engine installed a seccomp filter" in data["error"]["message"]
    code, text, _ = cli("test", str(attackers["filters"]), "--trust", str(keys.trust))
    assert code == 1 and "problem: the engine installed a seccomp filter" in text and "PASSED" not in text


# --- look-ups are named by the bytes sent ---------------------------------------------------------------


@needs_selftest
def test_every_native_query_is_named_by_its_own_bytes(
    attackers: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data = selftest(attackers["lookups"], keys)
    assert code == 1 and "looked up" in smoke(data)
    attempts = data["self_test"][0]["attempts"]
    assert {(a["event"], a["host"]) for a in attempts if a["verdict"] == "refused"} == {
        ("sendto", "evil-send.example"),
        ("write", "evil-write.example"),
        ("writev", "evil-writev.example"),
        ("sendmsg", "evil-sendmsg.example"),
        ("sendmmsg", "evil-sendmmsg.example"),
        ("sendto", "an unreadable name"),
    }
    assert all(a["lookup"] and a["address"] == "127.0.0.1:53" for a in attempts)
    assert {a["host"] for a in attempts if a["verdict"] == "allowed"} == {"allowed.example"}
    code, data = selftest(attackers["allowed"], keys)  # the Python look-up alone is allowed
    assert code == 0 and data["self_test"][0]["verdict"] == "passed", data


# --- the reader's bounds fail closed ---------------------------------------------------------------------


@needs_selftest
def test_a_sendmmsg_whose_line_is_over_the_readers_bound_fails_the_verdict(
    attackers: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    """Its last message goes to 10.255.255.23, 18 MB into the line: the line is never read in pieces."""
    code, data = selftest(attackers["bigmmsg"], keys)
    assert "sendmmsg" in smoke(data), data
    report = data["self_test"][0]
    assert code == 1 and report["verdict"] == "failed", report
    [unread] = [a for a in report["attempts"] if a["verdict"] == "refused"]
    assert (unread["event"], unread["host"]) == ("sendmmsg", "an unreadable destination")
    assert unread["why"] == "a line of the tracer's log over 16 MiB, not read"
    assert "an unreadable destination" in data["error"]["message"]
    code, text, _ = cli("test", str(attackers["bigmmsg"]), "--trust", str(keys.trust))
    assert code == 1 and "refused an unreadable destination (a line of the tracer's log over 16 MiB" in text
    assert list(private_tmp.iterdir()) == []


# --- units: the filter, the strace lines, the DNS reader ------------------------------------------------


def _installs(program: bytes) -> str:
    """In a child: our program installed, then seccomp(SET_MODE_FILTER, flags) of a filter that allows all."""
    code = f"""
import ctypes, os, struct
libc = ctypes.CDLL(None, use_errno=True)
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
def prog(b):
    buf = ctypes.create_string_buffer(b, len(b))
    return Fprog(len(b) // 8, ctypes.cast(buf, ctypes.c_void_p)), buf
ours, a = prog({program!r})
allow, b = prog(struct.pack("=HBBI", 6, 0, 0, 0x7FFF0000))
libc.prctl(38, 1, 0, 0, 0)
assert libc.prctl(22, 2, ctypes.byref(ours), 0, 0) == 0
out = []
for flags in (8, 8 | 1, 0):
    r = libc.syscall(317, 1, flags, ctypes.byref(allow))
    out.append("ok" if r >= 0 else os.strerror(ctypes.get_errno()))
print(",".join(out))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout.strip()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the child uses x86-64 system-call numbers")
def test_the_sandboxs_filter_refuses_a_listener_and_nothing_else() -> None:
    program = seccomp.program()
    assert program is not None and len(program) % 8 == 0
    assert _installs(program) == "Operation not permitted,Operation not permitted,ok"
    assert seccomp.program("riscv64") is None  # no numbers known: the tracer's rule alone


HOST = "\\x31\\x32\\x37\\x2e\\x30\\x2e\\x30\\x2e\\x31"  # "127.0.0.1" as strace -xx prints it


def _hex(data: bytes) -> str:
    return "".join(f"\\x{b:02x}" for b in data)


def _q(name: str) -> bytes:
    return (
        bytes.fromhex("abcd01000001000000000000")
        + b"".join(bytes([len(x)]) + x.encode() for x in name.split("."))
        + b"\x00\x00\x01\x00\x01"
    )


# Real strace 6.1 lines (-f -qq -yy -xx -s 1024), from an engine in the sandbox; only the names changed.
CAPTURED = "\n".join(
    [
        "29690 socket(AF_INET, SOCK_DGRAM|SOCK_CLOEXEC, IPPROTO_IP) = 3<UDP:[49570]>",
        f'29690 sendmsg(3<UDP:[49570]>, {{msg_name={{sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("{HOST}")}}, '
        f'msg_namelen=16, msg_iov=[{{iov_base="{_hex(_q("b.example"))}", iov_len=27}}], msg_iovlen=1, msg_controllen=0, '
        "msg_flags=0}, 0) = 27",
        f'29690 sendmsg(3<UDP:[49570]>, {{msg_name={{sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("{HOST}")}}, '
        f'msg_namelen=16, msg_iov=[{{iov_base="{_hex(_q("c.example")[:14])}", iov_len=14}}, {{iov_base="'
        f'{_hex(_q("c.example")[14:])}", iov_len=13}}], msg_iovlen=2, msg_controllen=0, msg_flags=0}}, 0) = 27',
        f'29690 connect(3<UDP:[49570]>, {{sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("{HOST}")}}, 16) = 0',
        f'29690 write(3<UDP:[49570]>, "{_hex(_q("d.example"))}", 27) = 27',
        f'29690 writev(3<UDP:[49570]>, [{{iov_base="{_hex(_q("e.example")[:10])}", iov_len=10}}, {{iov_base="'
        f'{_hex(_q("e.example")[10:])}", iov_len=17}}], 2) = -1 ECONNREFUSED (Connection refused)',
        f'29690 sendto(3<UDP:[49570]>, "{_hex(_q("f.example"))}", 27, 0, NULL, 0) = 27',
        "29690 sendfile(3<UDP:[49570]>, 4<\\x2f\\x74\\x6d\\x70\\x2f\\x71>, [0] => [28], 28) = 28",
        "29690 splice(5<\\x70\\x69\\x70\\x65\\x3a\\x5b\\x31\\x5d>, NULL, 3<UDP:[49570]>, NULL, 28, 0) = 28",
        f'29690 write(1<\\x2f\\x64\\x65\\x76\\x2f\\x6e\\x75\\x6c\\x6c<char 1:3>>, "{_hex(_q("not.sent"))}", 26) = 26',
        "29690 socket(AF_INET, SOCK_DGRAM, IPPROTO_IP) = 4<UDP:[49581]>",
        f"29690 sendmmsg(4<UDP:[49581]>, [{{msg_hdr={{msg_name={{sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("
        f'"{HOST}")}}, msg_namelen=16, msg_iov=[{{iov_base="{_hex(_q("h.example"))}", iov_len=27}}], msg_iovlen=1, '
        "msg_controllen=0, msg_flags=0}, msg_len=27}, {msg_hdr={msg_name={sa_family=AF_INET, sin_port=htons(53), "
        f'sin_addr=inet_addr("{HOST}")}}, msg_namelen=16, msg_iov=[{{iov_base="{_hex(_q("i.example"))}", iov_len=27}}], '
        "msg_iovlen=1, msg_controllen=0, msg_flags=0}, msg_len=27}], 2, 0) = 2",
        "29690 socket(AF_INET, SOCK_STREAM|SOCK_CLOEXEC, IPPROTO_IP) = 5<TCP:[49583]>",
        f'29690 connect(5<TCP:[49583]>, {{sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("{HOST}")}}, 16) = '
        "-1 ECONNREFUSED (Connection refused)",
    ]
)


def test_captured_sends_to_port_53_are_named_by_their_bytes() -> None:
    log = parse(CAPTURED)
    assert [(t.call, t.name) for t in log.attempts] == [
        ("sendmsg", "b.example"),
        ("sendmsg", "c.example"),
        ("write", "d.example"),
        ("writev", "e.example"),
        ("sendto", "f.example"),
        ("sendfile", None),
        ("splice", None),  # bytes the line does not show
        ("sendmmsg", "h.example"),
        ("sendmmsg", "i.example"),
        ("connect", None),  # a stream to port 53 that never sent a query: a look-up of a name not read
    ]
    assert all(t.lookup and (t.host, t.port) == ("127.0.0.1", 53) for t in log.attempts)


def test_a_sendmmsg_shown_in_two_halves_is_read_when_it_resumes() -> None:
    first = "7 sendmmsg(4<UDP:[9]>,  <unfinished ...>"
    rest = (
        f"7 <... sendmmsg resumed>[{{msg_hdr={{msg_name={{sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("
        f'"{HOST}")}}, msg_namelen=16, msg_iov=[{{iov_base="{_hex(_q("late.example"))}", iov_len=30}}], '
        "msg_iovlen=1, msg_controllen=0, msg_flags=0}, msg_len=30}], 1, 0) = 1"
    )
    log = parse("\n".join([first, "8 socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE) = 3<NETLINK:[15]>", rest]))
    assert [(t.call, t.name) for t in log.attempts] == [("sendmmsg", "late.example")]


def test_bytes_after_a_string_cut_short_are_not_read_as_the_query() -> None:
    head = _q("hub.example")[:16]  # the header and b"\x03hub", then strace's -s cut the iovec short
    line = (
        f'5 sendmsg(6<UDP:[14]>, {{msg_name={{sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("{HOST}")}}, '
        f'msg_namelen=16, msg_iov=[{{iov_base="{_hex(head)}"..., iov_len=2000}}, {{iov_base="'
        f'{_hex(_q("hub.example")[16:])}", iov_len=13}}], msg_iovlen=2, msg_controllen=0, msg_flags=0}}, 0) = 2013'
    )
    assert [(t.call, t.name) for t in parse(line).attempts] == [("sendmsg", None)]


def test_an_address_or_buffer_strace_could_not_read_is_no_peer_and_no_name() -> None:
    """Another thread can unmap what a call sent before strace reads it (sendmmsg is read when it returns):
    strace then shows a pointer. An address not read is somewhere, never the socket's peer; bytes not read
    name nothing."""
    q = _hex(_q("evil.example"))
    lines = [
        f'5 connect(6<UDP:[14]>, {{sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("{HOST}")}}, 16) = 0',
        "5 write(6<UDP:[14]>, 0x7ffd0000, 30) = 30",
        f'5 sendto(6<UDP:[14]>, "{q}", 30, 0, 0x7ffd0000, 16) = 30',
        f'5 sendmsg(6<UDP:[14]>, {{msg_name=0x7ffd0000, msg_namelen=16, msg_iov=[{{iov_base="{q}", iov_len=30}}], '
        "msg_iovlen=1, msg_controllen=0, msg_flags=0}, 0) = 30",
        "5 sendmmsg(6<UDP:[14]>, 0x7ffd0000, 2, 0) = 2",
        f'5 sendto(6<UDP:[14]>, "{q}", 30, 0, NULL, 0) = 30',  # the socket's peer: read as usual
    ]
    assert [(t.call, t.host, t.lookup, t.name) for t in parse("\n".join(lines)).attempts] == [
        ("write", "127.0.0.1", True, None),
        ("sendto", "?", False, None),
        ("sendmsg", "?", False, None),
        ("sendmmsg", "?", False, None),
        ("sendto", "127.0.0.1", True, "evil.example"),
    ]


def test_a_python_look_up_and_a_native_one_are_two_attempts_and_no_note_names_either() -> None:
    import base64

    from lockbuild.selftest.tracelog import MARKER

    def marker(host: str) -> str:
        note = json.dumps({"event": "socket.getaddrinfo", "host": host, "port": 443, "frames": ["e.py:9 in main"]})
        return _hex((MARKER + base64.urlsafe_b64encode(note.encode()).decode().rstrip("=")).encode())

    lines = [
        f'5 removexattr("{marker("allowed.example")}", "{_hex(b"user.lockbuild")}") = -1 ENOENT',
        f'5 connect(6<UDP:[14]>, {{sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("{HOST}")}}, 16) = 0',
        f'5 sendto(6<UDP:[14]>, "{_hex(_q("allowed.example"))}", 33, MSG_NOSIGNAL, NULL, 0) = 33',
        f'5 connect(7<UDP:[15]>, {{sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("{HOST}")}}, 16) = 0',
        f'5 sendto(7<UDP:[15]>, "{_hex(_q("evil.example"))}", 30, 0, NULL, 0) = 30',
        f'5 sendto(8<UDP:[16]>, "{_hex(b"not dns")}", 7, 0, {{sa_family=AF_INET, sin_port=htons(53), '
        f'sin_addr=inet_addr("{HOST}")}}, 16) = 7',
        f'5 sendto(8<UDP:[16]>, "{_hex(_q("far.example"))}", 29, 0, {{sa_family=AF_INET, sin_port=htons(53), '
        f'sin_addr=inet_addr("{_hex(b"10.0.0.53")}")}}, 16) = 29',
    ]
    log = parse("\n".join(lines))
    assert [(t.call, t.name, t.host, t.frames) for t in log.attempts] == [
        ("sendto", "allowed.example", "127.0.0.1", ("e.py:9 in main",)),  # the note adds its frame, no more
        ("sendto", "evil.example", "127.0.0.1", ()),
        ("sendto", None, "127.0.0.1", ()),
        ("sendto", "far.example", "10.0.0.53", ()),
    ]
    from lockbuild.selftest.report import judge

    got = [(a.host, a.verdict) for a in judge(log.notes, log.attempts, ["allowed.example", "far.example"])]
    assert got == [
        ("allowed.example", "allowed"),
        ("evil.example", "refused"),
        ("an unreadable name", "refused"),
        ("far.example", "refused"),
    ]  # an allowed name asked of a server that is not allowed


def test_a_filter_installed_after_the_canary_is_recorded_and_bubblewraps_own_is_not() -> None:
    import base64

    from lockbuild.selftest.tracelog import CANARY, MARKER

    canary = _hex(
        (MARKER + base64.urlsafe_b64encode(json.dumps({"event": CANARY}).encode()).decode().rstrip("=")).encode()
    )
    lines = [
        "3 prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, {len=18, filter=0x5581}) = 0",  # bwrap, before the inner run
        f'4 removexattr("{canary}", "{_hex(b"user.lockbuild")}") = -1 ENOENT (No such file or directory)',
        "4 prctl(PR_SET_DUMPABLE, SUID_DUMP_DISABLE) = 0",
        "9 seccomp(SECCOMP_GET_ACTION_AVAIL, 0, [SECCOMP_RET_USER_NOTIF]) = 0",
        "9 seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, {len=4, filter=0x7f}) = -1 EPERM "
        "(Operation not permitted)",
    ]
    assert parse("\n".join(lines)).seccomp == []
    for installed in (
        "9 seccomp(SECCOMP_SET_MODE_FILTER, 0, {len=1, filter=0x7f}) = 0",
        "9 seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, {len=4, filter=0x7f}) = "
        "4<anon_inode:seccomp notify>",
        "9 prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, {len=1, filter=0x7f}) = 0",
        "9 seccomp(SECCOMP_SET_MODE_FILTER, 0, {len=1, filter=0x7f} <unfinished ...>",
    ):  # never returned
        assert parse("\n".join([*lines, installed])).seccomp == [(installed.split()[1].split("(")[0], 9)]


def test_the_dns_reader_is_strict_and_joins_a_stream() -> None:
    assert question(_q("hub.example")) == "hub.example"
    assert question(_q("hub.example")[:-4]) is None  # no type and class: the question is not whole
    assert question(_q("hub.example")[:4] + b"\x00\x02" + _q("hub.example")[6:]) is None  # two questions
    assert (
        question(bytes.fromhex("abcd01000001000000000000") + b"\x0bhub.example\x00\x00\x01\x00\x01") == "hub\\.example"
    )
    assert question(bytes.fromhex("abcd01000001000000000000") + b"\xc0\x0c\x00\x01\x00\x01") is None  # a pointer
    # a label length over 63 is a pointer or a reserved label type, never a label: even with 64 bytes after it
    assert question(bytes.fromhex("abcd01000001000000000000") + b"\x40" + b"a" * 64 + b"\x00\x00\x01\x00\x01") is None
    assert question(bytes.fromhex("abcd01000001000000000000") + (b"\x3f" + b"a" * 63) * 4 + b"\x00" + bytes(4)) is None
    msg = _q("tcp.example")
    framed = len(msg).to_bytes(2, "big") + msg
    s = DnsStream()
    assert s.send(framed[:1], True) == [] and s.send(framed[1:9], True) == []
    assert s.send(framed[9:] + framed[:5], True) == ["tcp.example"]  # the next message begun
    assert s.left() == [None]  # ... and never finished: its question was not sent
    assert DnsStream().send(framed, False) == ["tcp.example", None]  # cut short by -s: nothing after it is read
    assert DnsStream().left() == [None]  # a stream that sent nothing


# --- units: every bound of the reader fails closed -------------------------------------------------------


def _connect(fd: int, inode: int, host: bytes = b"127.0.0.1", port: int = 53, kind: str = "UDP") -> str:
    return (
        f"5 connect({fd}<{kind}:[{inode}]>, {{sa_family=AF_INET, sin_port=htons({port}), "
        f'sin_addr=inet_addr("{_hex(host)}")}}, 16) = 0'
    )


def _unread(log: Any) -> list[tuple[str, int, str]]:
    from lockbuild.selftest.tracelog import UNREAD

    return [(t.call, t.pid, t.why) for t in log.attempts if t.host == UNREAD]


def _read_through_fifo(tmp_path: Path, data: bytes) -> Any:
    from lockbuild.selftest.trace import Reader

    reader = Reader(tmp_path / "strace.fifo", "strace")
    reader.start()
    with open(tmp_path / "strace.fifo", "wb") as f:
        f.write(data)
    return reader.finish()


def test_a_line_over_the_readers_bound_is_an_unreadable_destination_never_read_in_pieces(tmp_path: Path) -> None:
    from lockbuild.selftest.report import judge
    from lockbuild.selftest.tracelog import LINE_BOUND

    far = _hex(b"10.255.255.23")
    msg = (
        '{{msg_hdr={{msg_name={{sa_family=AF_INET, sin_port=htons(9), sin_addr=inet_addr("{0}")}}, msg_namelen=16, '
        'msg_iov=[{{iov_base="{1}", iov_len=1000}}], msg_iovlen=1, msg_controllen=0, msg_flags=0}}, msg_len=1000}}'
    )
    pad = msg.format(HOST, _hex(b"a" * 1000))
    many = ", ".join([pad] * (LINE_BOUND // len(pad) + 1) + [msg.format(far, "")])
    big = f"7 sendmmsg(4<UDP:[9]>, [{many}], 9999, 0) = 9999"
    to_file = f"7 writev(1<{_hex(b'/tmp/log')}>, [{', '.join(['{iov_base=' + chr(34) + _hex(b'a' * 1000) + chr(34) + ', iov_len=1000}'] * 5000)}], 5000) = 5000000"
    lines = [
        big,
        _connect(3, 8, b"10.0.0.1", 80, "TCP"),  # read as usual after the long line's end is skipped
        "8 sendmmsg(4<UDP:[9]>,  <unfinished ...>",
        f"8 <... sendmmsg resumed>[{many}], 9999, 0) = 9999",  # a second half over the bound
        to_file * (LINE_BOUND // len(to_file) + 1),  # a write to a file: its first argument says so
        _connect(5, 30),
        to_file.replace(f"7 writev(1<{_hex(b'/tmp/log')}>", "10 writev(5<UDP:[30]>") * (LINE_BOUND // len(to_file) + 1),
        "9 sendto(4<UDP:[9]>, ",  # the log ends inside a line
    ]
    assert len(big) > LINE_BOUND and len(lines[4]) > LINE_BOUND
    log = _read_through_fifo(tmp_path, "\n".join(lines).encode())
    too_long = "a line of the tracer's log over 16 MiB, not read"
    assert _unread(log) == [
        ("sendmmsg", 7, too_long),
        ("sendmmsg", 8, too_long),
        ("writev", 10, too_long),  # a write to a socket connected to port 53: a look-up not read
        ("sendto", 9, "the tracer's log ended inside a line"),
    ]
    assert [(t.call, t.host) for t in log.attempts if not t.why] == [("connect", "10.0.0.1")]
    assert {(a.host, a.verdict) for a in judge([], log.attempts, ["10.0.0.1", "10.255.255.23"])} == {
        ("10.0.0.1", "allowed"),
        ("an unreadable destination", "refused"),  # whatever the bundle allows
    }


def test_a_log_not_read_to_its_end_in_time_fails_the_verdict(tmp_path: Path) -> None:
    from lockbuild.selftest.trace import Reader

    reader = Reader(tmp_path / "strace.fifo", "strace")
    stuck = threading.Event()
    reader.parser.line = lambda line: stuck.wait(30) and None  # type: ignore[method-assign]
    reader.start()
    with open(tmp_path / "strace.fifo", "wb") as f:
        f.write(b"5 socket(AF_INET, SOCK_DGRAM, IPPROTO_IP) = 3<UDP:[7]>\n")
    log = reader.finish(timeout=0.2)
    stuck.set()
    assert _unread(log) == [("-", 0, "the tracer's log was not read to its end within 0 s")]


def test_the_map_of_peers_and_of_streams_is_bounded_and_full_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    from lockbuild.selftest import tracelog

    monkeypatch.setattr(tracelog, "MAX_PEERS", 2)
    monkeypatch.setattr(tracelog, "MAX_STREAMS", 1)
    q = _hex(_q("evil.example"))
    lines = [
        _connect(3, 11),
        _connect(4, 12),
        _connect(5, 13, b"127.0.0.1", 8080),  # no look-up: never kept, nor counted
        _connect(6, 14),  # a third socket to port 53: its sends could not be named
        f'5 write(3<UDP:[11]>, "{q}", 30) = 30',  # the kept ones are read as before
        _connect(7, 15, kind="TCP"),
        _connect(8, 16, kind="TCP"),  # a second stream to port 53
    ]
    log = parse("\n".join(lines))
    assert _unread(log) == [
        ("connect", 5, "more than 2 sockets connected to port 53"),
        ("connect", 5, "more than 1 streams to port 53"),
    ]
    assert ("write", "evil.example") in [(t.call, t.name) for t in log.attempts]


def test_calls_not_yet_resumed_are_bounded_and_past_it_fail_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    from lockbuild.selftest import tracelog

    monkeypatch.setattr(tracelog, "PENDING_BOUND", 150)
    msg = f'{{msg_name={{sa_family=AF_INET, sin_port=htons(9), sin_addr=inet_addr("{HOST}")}}, msg_namelen=16}}'
    lines = [
        f"6 sendmsg(4<UDP:[9]>, {msg}, 0 <unfinished ...>",  # kept: under the bound
        f"7 sendmsg(4<UDP:[9]>, {msg + ' ' * 100}, 0 <unfinished ...>",  # past it
        f'8 write(1<{_hex(b"/tmp/x")}>, "{_hex(b"y" * 100)}", 100 <unfinished ...>',  # a file: nothing to judge
        "6 <... sendmsg resumed>) = 0",
        "7 <... sendmsg resumed>) = 0",
    ]
    log = parse("\n".join(lines))
    assert _unread(log) == [("sendmsg", 7, "calls not yet resumed over 0 MiB")]


def test_attempts_and_look_ups_past_the_limit_fail_the_verdict() -> None:
    import base64

    from lockbuild.selftest.report import judge
    from lockbuild.selftest.tracelog import MARKER

    far = [_connect(3 + i, 20 + i, f"10.0.0.{i}".encode(), 80, "TCP") for i in range(3)]
    log = parse("\n".join(far), limit=2)
    assert [t.host for t in log.attempts] == ["10.0.0.0", "10.0.0.1", "an unreadable destination"]
    assert log.overflow and _unread(log) == [
        ("-", 0, "more than 2 distinct network attempts; the rest were not judged")
    ]

    def noted(host: str) -> str:
        note = json.dumps({"event": "socket.getaddrinfo", "host": host, "port": 443})
        return _hex((MARKER + base64.urlsafe_b64encode(note.encode()).decode().rstrip("=")).encode())

    notes = [
        f'5 removexattr("{noted(h)}", "{_hex(b"user.lockbuild")}") = -1 ENOENT' for h in ("a.x", "a.x", "b.x", "c.x")
    ]
    log = parse("\n".join(notes), limit=2)
    assert [n.host for n in log.notes] == ["a.x", "b.x"]  # distinct ones
    assert _unread(log) == [("-", 0, "more than 2 distinct look-ups noted; the rest were not judged")]
    long = parse(f'5 removexattr("{noted("a" * 250 + ".allowed")}", "{_hex(b"user.lockbuild")}") = -1 ENOENT')
    assert [(a.host, a.verdict) for a in judge(long.notes, [], ["a" * 250 + ".allowed"[:5]])] == [
        ("an unreadable name", "refused")  # a name over 255 bytes is never cut short into an allowed one
    ]
