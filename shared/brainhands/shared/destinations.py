"""Where a webhook may be posted: a public address, or one the operator allows.

A ``callback_url`` is chosen by a tenant but posted to from inside the deployment, so an
address that only the deployment can reach (loopback, a private range, link-local cloud
metadata, a cluster name) would let a tenant probe and call the private network. Each
destination is resolved once, and every address it resolves to is classified
(``refusal``): one refused address refuses it all, since the connection could go to any.
The caller then connects to the address that was checked (``brain.webhook_transport``), so
a name that resolves elsewhere a moment later (DNS rebinding) is never resolved again.

The operator's allow-list (``BRAINHANDS_WEBHOOK_ALLOW``, ``parse_allow_list``) names the
exceptions: networks (``10.1.0.0/16``, ``127.0.0.1``) whose addresses are accepted on any
port, and ``host:port`` pairs (``hooks.internal:8443``, ``[::1]:9000``) accepted whatever
they resolve to.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from brainhands.shared.errors import InvalidRequest, RefusedDestination

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Lookup = Callable[[str, int], Awaitable[Sequence[str]]]
"""Resolves (host, port) to the addresses a connection may go to."""

RESOLVE_TIMEOUT = 5.0
TOLD_REFUSED = (
    f"callback_url: {RefusedDestination.TOLD}: a webhook goes to a public address only "
    "(loopback, private, link-local, multicast, reserved and unspecified addresses are "
    "refused unless the deployment's operator allows them)"
)

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries to its destination: mapped (``::ffff:a.b.c.d``),
    6to4 (``2002:aabb:ccdd::``) or NAT64 (``64:ff9b::a.b.c.d``); None for any other."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refusal(address: Address) -> str | None:
    """Why a webhook may not go to ``address`` (``"loopback"``, ``"private"`` ...), or None
    when it is public. An IPv6 address that carries an IPv4 one is judged by that one."""
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        return refusal(embedded)
    for reason, matches in (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("not global", not address.is_global),  # e.g. 100.64.0.0/10, shared by carriers
    ):
        if matches:
            return reason
    return None


@dataclass(frozen=True)
class AllowList:
    """The destinations an operator allows although ``refusal`` refuses them."""

    networks: tuple[Network, ...] = ()
    endpoints: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    """(host, port) pairs, host lowercased (an address in its canonical spelling)."""

    def allows(self, host: str, port: int, address: Address) -> bool:
        unwrapped = _embedded_ipv4(address) or address
        return (
            any(unwrapped in net or address in net for net in self.networks)
            or (_canonical(host), port) in self.endpoints
            or (str(unwrapped), port) in self.endpoints
        )


def _canonical(host: str) -> str:
    host = host.strip("[]").lower()
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def parse_allow_list(value: str) -> AllowList:
    """``10.0.0.0/8,127.0.0.1,hooks.internal:8443,[::1]:9000`` as an ``AllowList``;
    ``ValueError`` naming the entry that is neither a network nor ``host:port``."""
    networks: list[Network] = []
    endpoints: set[tuple[str, int]] = set()
    for entry in (part.strip() for part in value.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]")))
            continue
        except ValueError:
            pass
        host, _, port = entry.rpartition(":")
        if not host or (":" in host and not host.startswith("[")):
            raise ValueError(
                f"{entry!r} is neither a network (10.0.0.0/8, 127.0.0.1) nor host:port "
                "(hooks.internal:8443, [::1]:9000)"
            )
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
        endpoints.add((_canonical(host), int(port)))
    return AllowList(tuple(networks), frozenset(endpoints))


def split_destination(url: str) -> tuple[str, int]:
    """The host and port a webhook to ``url`` connects to; ``InvalidRequest`` saying what
    is wrong with a URL that is not ``http(s)://host[:port]/...`` without credentials."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidRequest(f"callback_url is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidRequest("callback_url must be an http:// or https:// URL")
    if not parts.hostname:
        raise InvalidRequest("callback_url names no host")
    if parts.username is not None or parts.password is not None:
        raise InvalidRequest("callback_url may not carry credentials (user:password@)")
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


async def lookup(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, as the system resolver gives them (which reads
    ``2130706433``, ``127.1`` and ``0x7f.1`` as 127.0.0.1, as a connection would)."""
    loop = asyncio.get_running_loop()
    found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(sockaddr[0]) for *_, sockaddr in found]


def literal_address(host: str) -> Address | None:
    """The address ``host`` names by itself, in any spelling a resolver reads as one: IPv6,
    dotted IPv4 and its shorthands (``2130706433``, ``127.1``, ``0x7f.1``, ``0177.0.0.1``);
    None for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


async def checked_address(
    host: str, port: int, allow: AllowList, *, resolve: Lookup = lookup
) -> Address:
    """The address to connect to for ``host:port``: resolved once, every address it resolves
    to public or allowed, else ``RefusedDestination`` naming the first that is not (or
    saying it does not resolve)."""
    literal = literal_address(host)
    if literal is not None:
        addresses: list[Address] = [literal]
    else:
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT):
                found = await resolve(host, port)
            addresses = [ipaddress.ip_address(a.partition("%")[0]) for a in found]
        except (OSError, TimeoutError, ValueError):
            addresses = []
        if not addresses:
            raise RefusedDestination(f"{host} does not resolve")
    for address in addresses:
        reason = refusal(address)
        if reason is not None and not allow.allows(host, port, address):
            raise RefusedDestination(f"{host} is a {reason} address ({address})")
    return addresses[0]


def check_destination(url: str, allow: AllowList) -> None:
    """Refuse a ``callback_url`` that is plainly not to be posted to, with an
    ``InvalidRequest`` fit to show the tenant who named it: what is wrong with its form, or
    only that it is a refused destination. Plainly: an address written in any spelling, or
    ``localhost`` (``*.localhost`` too, which resolvers keep on loopback), that is not public
    and not allowed. A name is not resolved here (the API would wait on DNS that a tenant
    chooses, and tell it what resolves inside): it is checked at each try to post."""
    host, port = split_destination(url)
    address = literal_address(host)
    if address is None and (host == "localhost" or host.endswith(".localhost")):
        address = ipaddress.IPv4Address("127.0.0.1")
    if address is not None and refusal(address) and not allow.allows(host, port, address):
        raise InvalidRequest(TOLD_REFUSED)
