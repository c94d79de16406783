"""An httpx transport that connects only to the address it has just checked.

Checking a webhook's host and then letting the HTTP client resolve it again would leave a
window: a name that resolves to a public address for the check and to 127.0.0.1 for the
connection (DNS rebinding) would pass. Here each request's host is resolved once and
checked (``shared.destinations.checked_address``), and the connection goes to that very
address: the request's URL names the address, while the ``Host`` header (set from the URL
the caller gave) and the TLS server name (``sni_hostname``, which the certificate is also
checked against) still name the host. Connections are not kept alive, so none opened for
one host is reused for another that resolves to the same address.
"""

from __future__ import annotations

import ssl

import httpx

from brainhands.shared.destinations import AllowList, Lookup, checked_address, lookup


class PinnedTransport(httpx.AsyncBaseTransport):
    def __init__(
        self, allow: AllowList, *, resolve: Lookup = lookup, verify: ssl.SSLContext | bool = True
    ) -> None:
        """``verify``: how a receiver's certificate is checked (httpx's; default: the
        system's CAs), always against the host's name."""
        self._allow = allow
        self._resolve = resolve
        self._http = httpx.AsyncHTTPTransport(
            verify=verify, limits=httpx.Limits(max_keepalive_connections=0)
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` to the checked address of its host; ``RefusedDestination``
        (before anything is sent) when the host may not be posted to."""
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        address = await checked_address(url.host, port, self._allow, resolve=self._resolve)
        request.url = url.copy_with(host=str(address))
        request.extensions = {**request.extensions, "sni_hostname": url.host}
        return await self._http.handle_async_request(request)

    async def aclose(self) -> None:
        await self._http.aclose()
