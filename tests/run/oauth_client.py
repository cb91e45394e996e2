"""A local OAuth issuer and an agent for `germline serve --oauth-*` (issue 29).

usage: oauth_client.py keys DIR
    Makes the issuer's RSA key (kid "k1") and a rogue RSA key under the same kid, writes
    DIR/jwks.json (the issuer's public key only) and both private keys as PEM.
usage: oauth_client.py check URL DIR ISSUER STATIC_TOKEN_FILE
    Mints tokens with the issuer's key (and one with the rogue key), then:
    - reads the protected-resource metadata (RFC 9728) without a token;
    - for no token, an expired token, one for another audience, one from another issuer and
      one signed by the rogue key: a raw POST's status and WWW-Authenticate, and whether the
      MCP SDK client (bearer header) gets through;
    - with a good token: the SDK client initializes and calls get_current_time, and reads
      /status.json with the same token while its session is open (whose user it shows);
    - with the static token: the same.
    Prints one JSON object.
usage: oauth_client.py mint DIR KEY ISSUER AUDIENCE
    Prints a token good for an hour, signed by DIR/KEY.pem (issuer or rogue), user "dave".
usage: oauth_client.py rotate DIR
    Rewrites DIR/jwks.json with the rogue key's public key under kid "k1" (a key rotation)."""
import asyncio, json, os, sys, time

import httpx
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def publish(d, name):
    """DIR/jwks.json: the public half of DIR/NAME.pem, kid "k1"."""
    with open(os.path.join(d, name + ".pem"), "rb") as f:
        k = serialization.load_pem_private_key(f.read(), password=None)
    jwk = json.loads(RSAAlgorithm.to_jwk(k.public_key()))
    jwk.update({"kid": "k1", "alg": "RS256", "use": "sig"})
    tmp = os.path.join(d, "jwks.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"keys": [jwk]}, f)
    os.replace(tmp, os.path.join(d, "jwks.json"))


def keys(d):
    for name in ("issuer", "rogue"):
        k = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        with open(os.path.join(d, name + ".pem"), "wb") as f:
            f.write(k.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    publish(d, "issuer")


def mint(d, key, **claims):
    with open(os.path.join(d, key + ".pem"), "rb") as f:
        pem = f.read()
    return jwt.encode(claims, pem, algorithm="RS256", headers={"kid": "k1"})


async def sdk(url, token, status_url):
    """Initialize, call a tool and read /status.json inside the session; the outcome."""
    headers = {"Authorization": "Bearer " + token} if token else {}
    try:
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await asyncio.wait_for(session.initialize(), 20)
                    r = await session.call_tool("get_current_time", {"timezone": "UTC"})
                    status = (await http.get(status_url)).json()
                    return {
                        "ok": True,
                        "tool_ok": not r.is_error,
                        "status_user": status.get("user"),
                        "session_users": [s.get("user") for s in status.get("sessions", [])],
                    }
    except BaseException as e:  # the SDK raises an exception group on a refused POST
        return {"ok": False, "error": repr(e)[:300]}


async def check(url, d, issuer, static_file):
    now = int(time.time())
    base = url.rsplit("/mcp", 1)[0]
    good = dict(iss=issuer, aud=url, sub="someone-else", preferred_username="carol",
                iat=now, exp=now + 300)
    bad = {
        "none": None,
        "expired": mint(d, "issuer", **{**good, "iat": now - 900, "exp": now - 600}),
        "wrong_audience": mint(d, "issuer", **{**good, "aud": "http://elsewhere/mcp"}),
        "wrong_issuer": mint(d, "issuer", **{**good, "iss": "https://other-issuer.test"}),
        "wrong_key": mint(d, "rogue", **good),
    }
    out = {}
    async with httpx.AsyncClient() as c:
        m = await c.get(base + "/.well-known/oauth-protected-resource")
        out["metadata"] = {"status": m.status_code, "body": m.json()}
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "oauth-check", "version": "0"}}}
        for name, tok in bad.items():
            h = {"Accept": "application/json, text/event-stream"}
            if tok:
                h["Authorization"] = "Bearer " + tok
            r = await c.post(url, json=init, headers=h)
            out[name] = {
                "status": r.status_code,
                "www_authenticate": r.headers.get("www-authenticate"),
                "message": r.json().get("error", {}).get("message") if r.content else None,
                "sdk": await sdk(url, tok, base + "/status.json"),
            }
    out["good"] = await sdk(url, mint(d, "issuer", **good), base + "/status.json")
    out["static"] = await sdk(url, open(static_file).read().strip(), base + "/status.json")
    print(json.dumps(out))


if sys.argv[1] == "keys":
    keys(sys.argv[2])
elif sys.argv[1] == "rotate":
    publish(sys.argv[2], "rogue")
elif sys.argv[1] == "mint":
    d, key, iss, aud = sys.argv[2:6]
    now = int(time.time())
    print(mint(d, key, iss=iss, aud=aud, sub="dave", iat=now, exp=now + 3600))
else:
    asyncio.run(check(*sys.argv[2:6]))
