"""The explorer's session token: only whoever holds the URL ``profuse explore`` printed opens it.

127.0.0.1 is every local account's: without a token any of them could read the op table and the
trace's path. As Jupyter does, the server makes a random token at start and prints it in the URL
(``http://127.0.0.1:PORT/?token=...``). Every request (the page, its files, the API) carries it, in
the query or in a cookie that the page sets: HttpOnly (no script reads it) and SameSite=Strict (no
other site's page sends it), named for the port (cookies are shared by every port of a host), so the
page's own ``fetch("/api/...")`` carries it with no change to the front end. Anything else gets 403.
"""
from __future__ import annotations

import secrets
import urllib.parse
from typing import Any

import msgspec
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import Response

# a top-level navigation these started is sent its strict cookie after a redirect; from another site's
# link ("cross-site") or a client that says nothing it would not be: those get the page at once instead
REDIRECTED_FROM = ("none", "same-origin", "same-site")
FORBIDDEN = "forbidden: open the explorer with the URL profuse explore printed (http://127.0.0.1:PORT/?token=...)"


def new_token() -> str:
    """A fresh session token (256 random bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def cookie_name(scope: Any) -> str:
    """The session cookie's name for the server that got ``scope`` (its port: one cookie per explorer)."""
    server = scope.get("server")
    return f"profuse-explorer-{server[1]}" if server else "profuse-explorer"


class SessionTokenOnly:
    """ASGI middleware: answer only requests that carry the session token (query ``token`` or the
    session cookie); the page opened with it in the query sets the cookie (and, where the browser will
    send it, is sent on to the same URL without the token)."""

    def __init__(self, app: Any, *, token: str, headers: dict[str, str]) -> None:
        self.app, self.token, self.headers = app, token.encode(), headers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """403 without the token; the page with it in the query: the cookie set; else the app's answer."""
        if scope["type"] != "http":
            if scope["type"] != "websocket":  # none is served: a websocket is refused with no answer
                await self.app(scope, receive, send)
            return
        request = Request(scope)
        in_query = request.query_params.get("token")
        given = in_query if in_query is not None else request.cookies.get(cookie_name(scope))
        if given is None or not secrets.compare_digest(given.encode("utf-8", "replace"), self.token):
            await self.forbidden(scope["path"])(scope, receive, send)
        elif in_query is not None and scope["path"] == "/":
            await self.page(request, receive, send)
        else:
            await self.app(scope, receive, send)

    async def page(self, request: Request, receive: Any, send: Any) -> None:
        """The page opened with the token in its query: the cookie set, and a redirect to the URL
        without the token where the browser started the navigation itself (it then sends the cookie)."""
        cookie = f"{cookie_name(request.scope)}={self.token.decode()}; Path=/; HttpOnly; SameSite=Strict"
        if request.headers.get("sec-fetch-site") in REDIRECTED_FROM:
            rest = urllib.parse.urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
            location = request.url.path + (f"?{rest}" if rest else "")
            await Response(status_code=303, headers=self.headers | {"Location": location, "Set-Cookie": cookie})(
                request.scope, receive, send)
            return

        async def with_cookie(message: Any) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append("Set-Cookie", cookie)
            await send(message)

        await self.app(request.scope, receive, with_cookie)

    def forbidden(self, path: str) -> Response:
        """403: one line of JSON for the API, of text for anything else."""
        if path.startswith("/api/"):
            return Response(msgspec.json.encode({"error": FORBIDDEN}), status_code=403,
                            media_type="application/json", headers=self.headers)
        return Response(FORBIDDEN + "\n", status_code=403, media_type="text/plain", headers=self.headers)
