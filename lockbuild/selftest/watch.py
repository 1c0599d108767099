"""The watch hook placed in the test environment: it adds the Python frame to what the tracer sees.

Loaded *by path* from a ``.pth``, it turns each socket audit event into a harmless ``removexattr`` under
:data:`tracelog.MARKER` that the tracer logs; :func:`tracelog.parse` joins the two. It decides nothing: an
engine that silences it loses only the frame, never the attempt's report."""

from __future__ import annotations

from lockbuild.selftest.tracelog import MARKER

MODULE = "_lockbuild_selftest"
PTH = f"{MODULE}.pth"

_TEMPLATE = '''\
"""Written by lockbuild test: notes this process's socket events for the tracer (the self-test's watch hook)."""


def _install():
    import base64
    import json
    import os
    import sys

    events = ("socket.__new__", "socket.connect", "socket.sendto", "socket.sendmsg", "socket.bind",
              "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo")
    here = __file__
    note_call = os.removexattr
    dumps = json.dumps
    encode = base64.urlsafe_b64encode

    def hook(event, args):
        if event not in events:
            return
        try:
            host = port = None
            if event == "socket.getaddrinfo":
                host, port = args[0], args[1]
            elif event in ("socket.gethostbyname", "socket.gethostbyaddr"):
                host = args[0]
            elif event == "socket.getnameinfo":
                host = args[0][0] if isinstance(args[0], tuple) and args[0] else None
            elif event == "socket.__new__":
                host = None
            else:
                address = args[1]
                if not isinstance(address, tuple) or not address:
                    return  # AF_UNIX and other local families
                host, port = address[0], (address[1] if len(address) > 1 else None)
            if isinstance(host, bytes):
                host = host.decode("ascii", "replace")
            if host is not None and not isinstance(host, str):
                host = str(host)
            frames = []
            f = sys._getframe(1)
            while f is not None and len(frames) < 4:
                name = f.f_code.co_filename
                if name != here and not name.endswith("/socket.py"):
                    frames.append(("%s:%d in %s" % (name, f.f_lineno, f.f_code.co_name))[-200:])
                f = f.f_back
            while True:
                note = dumps({"event": event, "host": host, "port": port if isinstance(port, int) or port is None
                              else str(port)[:32], "frames": frames})
                payload = encode(note.encode("utf-8", "replace")).decode("ascii").rstrip("=")
                if len(payload) <= 960 or not frames:
                    break
                frames.pop()
            try:
                note_call(@MARKER@ + payload[:960], "user.lockbuild")
            except OSError:
                pass
        except Exception:
            pass

    sys.addaudithook(hook)


_install()
'''


def module_text() -> str:
    return _TEMPLATE.replace("@MARKER@", repr(MARKER))


def pth_line() -> str:
    """The ``.pth`` line: runs the hook's file by path, found beside the ``.pth`` (``site`` runs the line with
    ``sitedir`` set; the environment is renamed after the install), and not by ``import``, which would take
    whatever ``sys.modules`` already holds under that name."""
    return (
        f"import os; _p = os.path.join(sitedir, {MODULE + '.py'!r}); exec(compile(open(_p, 'rb').read(), _p, "
        f"'exec'), {{'__file__': _p, '__name__': {MODULE!r}}})\n"
    )
