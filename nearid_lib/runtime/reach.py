"""Whether the GPT server of FPR's DreamBench++ column can be reached from this node, decided in a
few seconds before any request: one TCP connection to its host and port (or to the proxy the
environment routes it through), once per process. A compute node without internet then closes the
column's gate with the reason instead of failing on its first request (:mod:`nearid_lib.gates`,
:mod:`nearid_lib.fpr.gpt_score`)."""
from __future__ import annotations

import os
import socket
import threading
import urllib.parse
import urllib.request

__all__ = ["DEFAULT_BASE_URL", "REACH_TIMEOUT", "api_url", "endpoint_reason"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"     # where the openai client goes without a base URL
REACH_TIMEOUT = 3.0                                 # seconds the reachability check waits


def api_url(base_url: str | None = None) -> str:
    """The chat-completions server the score goes to: ``base_url`` (``retrieval.gpt_base_url``),
    else ``$OPENAI_BASE_URL``, else OpenAI's own (what the ``openai`` client picks the same way)."""
    return base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL


# (host, port) -> why it is unreachable (None: reachable): the check runs once per process, so a
# gate consulted for every table costs one connection, not one per table.
_REACHED: dict[tuple[str, int], str | None] = {}


def _connect(host: str, port: int, timeout: float) -> str | None:
    """Why a TCP connection to ``host:port`` fails (None: it opened). Run in a thread and waited
    for ``timeout``: the name lookup before the connection has no timeout of its own, and on a node
    without a reachable DNS server it can hang far longer than the connection would."""
    out: dict[str, str | None] = {}

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            out["why"] = None
        except OSError as err:
            out["why"] = f"{type(err).__name__}: {err}"

    t = threading.Thread(target=probe, name=f"reach-{host}", daemon=True)
    t.start()
    t.join(timeout + 0.5)
    return out["why"] if "why" in out else f"no answer within {timeout:g} s"


def endpoint_reason(base_url: str | None = None, timeout: float = REACH_TIMEOUT) -> str | None:
    """Why the GPT server (:func:`api_url` of ``base_url``) cannot be reached from this node, or None:
    one TCP connection to its host and port -- to the proxy when the environment routes the URL
    through one (``HTTPS_PROXY`` ..., as the client does) -- waited for at most ``timeout`` seconds,
    once per process and host. No request is sent and no key is needed: this says only that a
    request could leave the node."""
    url = api_url(base_url)
    u = urllib.parse.urlsplit(url)
    if not u.hostname:
        return f"the GPT server URL {url!r} names no host (retrieval.gpt_base_url / $OPENAI_BASE_URL)"
    host, port, via = u.hostname, u.port or (443 if u.scheme == "https" else 80), ""
    proxy = None if urllib.request.proxy_bypass(host) else urllib.request.getproxies().get(u.scheme)
    if proxy:
        p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if p.hostname:
            via = f" through the proxy {p.hostname}:{p.port or 80}"
            host, port = p.hostname, p.port or 80
    if (host, port) not in _REACHED:
        _REACHED[(host, port)] = _connect(host, port, timeout)
    why = _REACHED[(host, port)]
    if why is None:
        return None
    return (f"the GPT server {url} is not reachable from this node ({host}:{port}{via}: {why}); the DreamBench++ "
            f"GPT score is not computed: run the notebook where {u.hostname} is reachable, or point "
            f"retrieval.gpt_base_url / $OPENAI_BASE_URL at a server this node reaches")
