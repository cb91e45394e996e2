"""Requests to declared destinations. Plain urllib, which takes HTTP_PROXY/HTTPS_PROXY from the
environment: under germline that is the broker's per-copy proxy, in the harness's unprotected
mode its plain forwarding proxy. Bodies are canonical JSON (sorted keys) so that a flow-compliant
copy's requests are identical across copies (the broker compares them by digest)."""
from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from . import HOOKS


class Unavailable(Exception):
    """The destination did not answer with 2xx (a placeholder under germline, a sink error)."""


def post_json(host: str, path: str, payload: dict, *, timeout: float = 10.0) -> dict:
    fields, headers = HOOKS.extra(host)
    body = dict(payload)
    body.update(fields)
    req = urllib.request.Request(
        f"http://{host}{path}",
        data=json.dumps(body, sort_keys=True, separators=(",", ":")).encode(),
        headers={"Content-Type": "application/json", **headers},
        method="POST",
    )
    return _send(req, timeout)


def get_json(url: str, *, timeout: float = 10.0) -> dict:
    host = urllib.parse.urlparse(url).hostname or ""
    fields, headers = HOOKS.extra(host)
    if fields:  # a GET carries extra fields in its query string
        sep = "&" if "?" in url else "?"
        url += sep + urllib.parse.urlencode(fields)
    return _send(urllib.request.Request(url, headers=headers, method="GET"), timeout)


def _send(req: urllib.request.Request, timeout: float) -> dict:
    try:
        with urllib.request.urlopen(req, timeout=timeout) as reply:
            data = reply.read()
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise Unavailable(str(err)) from None
    try:
        return json.loads(data or b"{}")
    except ValueError:
        return {"text": data.decode("utf-8", "replace")}
