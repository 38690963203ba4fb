"""Who may use the server: with a token set, every request carries it, as ``Authorization:
Bearer <token>`` (API clients) or as the console's cookie, which a browser gets by giving
the token once (the login form, or ``/?token=...``).

The cookie holds an HMAC of the token, not the token; it is ``HttpOnly`` and
``SameSite=Strict``, and a request that changes something (POST, DELETE) on the cookie's
word must also come from the console's own origin, so another site cannot act through a
logged-in browser.
"""

from __future__ import annotations

import hashlib
import hmac
import html
from typing import Any
from urllib.parse import parse_qs

from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

COOKIE = "sparkcq_console"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
MAX_LOGIN_BYTES = 4096
LOGIN_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>sparkcq console: token</title>
<style>body{{font:15px system-ui,sans-serif;margin:4em auto;max-width:28em;color:#222}}
input{{font:inherit;padding:.4em;width:100%;box-sizing:border-box}}
button{{font:inherit;margin-top:.6em;padding:.4em 1em}} .bad{{color:#b00020}}</style>
</head><body><h1>sparkcq</h1>
<p>This server needs its token (the one given to <code>sparkcq serve --token</code>).</p>
{problem}<form method="post" action="/login"><label>Token
<input type="password" name="token" autocomplete="current-password" autofocus></label>
<button type="submit">Open the console</button></form></body></html>"""


def equal(given: str, expected: str) -> bool:
    """Whether two secrets are equal, in time that does not tell how much of them matched."""
    return hmac.compare_digest(given.encode(), expected.encode())


def session_value(token: str) -> str:
    """The cookie's value for ``token``: an HMAC, so the cookie does not show the token."""
    return hmac.new(token.encode(), b"sparkcq console session", hashlib.sha256).hexdigest()


def login_page(problem: str | None = None, status: int = 401) -> HTMLResponse:
    """The token form (401: the console was asked for without the token)."""
    note = f'<p class="bad">{html.escape(problem)}</p>' if problem else ""
    return HTMLResponse(LOGIN_PAGE.format(problem=note), status_code=status)


def logged_in(token: str, target: str = "/") -> RedirectResponse:
    """Go to ``target`` with the console's cookie set."""
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, session_value(token), httponly=True, samesite="strict",
                        path="/")
    return response


def same_origin(request: Request) -> bool:
    """Whether a browser request comes from this server's own pages."""
    origin = request.headers.get("origin")
    if origin is None:
        return request.headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")
    return origin == f"{request.url.scheme}://{request.headers.get('host', '')}"


class TokenAuth(BaseHTTPMiddleware):
    """Every request must carry the token (see the module) when the server has one."""

    def __init__(self, app: Any, token: str):
        super().__init__(app)
        self.token = token
        self.bearer = f"Bearer {token}"
        self.cookie = session_value(token)

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:  # noqa: D102
        if equal(request.headers.get("authorization", ""), self.bearer):
            return await call_next(request)
        path = request.url.path
        if path == "/login":
            return await self.login(request)
        if equal(request.cookies.get(COOKIE, ""), self.cookie):
            if request.method not in SAFE_METHODS and not same_origin(request):
                return JSONResponse({"error": "a change through the console's cookie must "
                                     "come from the console's page", "kind": "AuthError"},
                                    status_code=403)
            return await call_next(request)
        given = request.query_params.get("token")
        if path == "/" and given is not None:
            if equal(given, self.token):
                return logged_in(self.token)
            return login_page("That token is not this server's.")
        if path == "/" or "text/html" in request.headers.get("accept", ""):
            return login_page()
        return JSONResponse({"error": "missing or wrong token", "kind": "AuthError"},
                            status_code=401)

    async def login(self, request: Request) -> Response:
        """``GET /login``: the form; ``POST /login``: check the token, set the cookie."""
        if request.method != "POST":
            return login_page(status=200)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_LOGIN_BYTES:
                return login_page("The form is too large.", status=413)
        given = parse_qs(body.decode("utf-8", "replace")).get("token", [""])[0]
        if equal(given, self.token):
            return logged_in(self.token)
        return login_page("That token is not this server's.")
