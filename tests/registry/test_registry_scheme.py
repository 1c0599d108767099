"""A registry reached over plain http on this machine cannot send lockbuild anywhere else over plain
http: a redirect to http:// on another host is refused before any request goes there (only https, or
this machine, or --plain-http)."""

from __future__ import annotations

import pytest
from test_registry_transport import FAST, fake, registry

from lockbuild.registry.api import RegistryError


def test_a_redirect_to_plain_http_elsewhere_is_refused_before_it_is_followed() -> None:
    def script(h: object) -> None:
        from test_registry_transport import _Handler

        assert isinstance(h, _Handler)
        h.answer(307, b"", {"Location": "http://203.0.113.7:9/v2/site/x/manifests/1"})

    with fake(script) as server:
        r = registry(server, transport=FAST)
        with pytest.raises(RegistryError, match=r"sent us to http://203\.0\.113\.7, which is not https"):
            r.get_manifest("1")
        assert [s.path for s in server.seen] == ["/v2/site/x/manifests/1"]
