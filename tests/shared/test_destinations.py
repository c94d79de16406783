"""Where a webhook may go: the address classifier over every spelling of an internal
address, the operator's allow-list, and the one resolution whose addresses are all checked."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import pytest

from brainhands.shared.destinations import (
    TOLD_REFUSED,
    AllowList,
    check_destination,
    checked_address,
    parse_allow_list,
    refusal,
    split_destination,
)
from brainhands.shared.errors import InvalidRequest, RefusedDestination

NOTHING = AllowList()

REFUSED = {
    "127.0.0.1": "loopback",
    "127.255.0.9": "loopback",
    "::1": "loopback",
    "0.0.0.0": "unspecified",
    "::": "unspecified",
    "169.254.169.254": "link-local",  # cloud metadata
    "fe80::1": "link-local",
    "10.0.0.1": "private",
    "172.16.5.4": "private",
    "192.168.1.1": "private",
    "fc00::1": "private",
    "fd12:3456::1": "private",
    "224.0.0.1": "multicast",
    "ff02::1": "multicast",
    "240.0.0.1": "reserved",
    "255.255.255.255": "reserved",
    "100.64.0.1": "not global",  # carrier-grade NAT
    "192.0.2.1": "private",  # documentation
    "198.18.0.1": "private",  # benchmarking
    # IPv6 that carries an IPv4 address to its destination: judged by that address
    "::ffff:127.0.0.1": "loopback",
    "::ffff:169.254.169.254": "link-local",
    "::ffff:10.0.0.1": "private",
    "2002:7f00:1::": "loopback",  # 6to4 of 127.0.0.1
    "2002:a00:1::": "private",  # 6to4 of 10.0.0.1
    "64:ff9b::7f00:1": "loopback",  # NAT64 of 127.0.0.1
    "::127.0.0.1": "reserved",  # IPv4-compatible (deprecated)
}


@pytest.mark.parametrize(("address", "reason"), sorted(REFUSED.items()))
def test_every_internal_address_is_refused_with_its_reason(address: str, reason: str) -> None:
    assert refusal(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "2002:808:808::"]
)
def test_a_public_address_is_not_refused(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


def resolving(*addresses: str) -> object:
    """A resolver that answers ``addresses`` for any name, as a DNS server chosen by an
    attacker would."""

    async def resolve(host: str, port: int) -> Sequence[str]:
        return addresses

    return resolve


# Each spelling the system resolver reads as a loopback address, as a connection would.
LOOPBACK_SPELLINGS = ["localhost", "127.0.0.1", "2130706433", "127.1", "0x7f.1", "0177.0.0.1"]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
async def test_every_spelling_of_loopback_resolves_to_a_refusal(host: str) -> None:
    with pytest.raises(RefusedDestination, match="loopback"):
        await checked_address(host, 80, NOTHING)


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1]:8080/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://0.0.0.0:9000/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://169.254.169.254/latest/meta-data/",
        "https://[fe80::1]/",
        "http://10.1.2.3:5432/",
        "http://localhost:15672/api/",
        "http://rabbit.localhost:15672/",
        "http://0177.0.0.1/",
        "http://0/",
    ],
)
def test_an_internal_url_is_refused_at_submission_saying_only_that(url: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_destination(url, NOTHING)
    assert str(refused.value) == TOLD_REFUSED  # not which address, nor why


def test_a_name_is_left_to_the_check_at_each_post_and_an_allowed_address_passes() -> None:
    check_destination("https://no-such-host.invalid/hook", NOTHING)  # no DNS at submission
    check_destination("https://93.184.216.34/hook", NOTHING)
    check_destination("http://127.1:9000/", parse_allow_list("127.0.0.1:9000"))
    with pytest.raises(InvalidRequest):
        check_destination("http://127.1:9001/", parse_allow_list("127.0.0.1:9000"))


async def test_a_name_is_refused_when_any_address_it_resolves_to_is_internal() -> None:
    # A cluster name, or a DNS answer with one public and one private address: the
    # connection could go to either, so both are checked.
    for answer in (["10.96.0.10"], ["93.184.216.34", "127.0.0.1"], ["::ffff:192.168.0.1"]):
        with pytest.raises(RefusedDestination):
            await checked_address("hooks.example.com", 443, NOTHING, resolve=resolving(*answer))
    chosen = await checked_address(
        "hooks.example.com", 443, NOTHING, resolve=resolving("93.184.216.34", "2606:4700::1")
    )
    assert chosen == ipaddress.ip_address("93.184.216.34")


async def test_a_name_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(RefusedDestination, match="does not resolve"):
        await checked_address("no-such-host.invalid", 80, NOTHING)
    with pytest.raises(RefusedDestination, match="does not resolve"):
        await checked_address("empty.example.com", 80, NOTHING, resolve=resolving())


async def test_the_allow_list_lets_through_what_it_names_only() -> None:
    allow = parse_allow_list("127.0.0.1/32, 10.1.0.0/16, hooks.internal:8443, [::1]:9000")
    assert await checked_address("127.1", 5000, allow) == ipaddress.ip_address("127.0.0.1")
    assert await checked_address("::ffff:127.0.0.1", 1, allow)  # mapped: the same address
    assert await checked_address("10.1.200.3", 80, allow)
    internal = resolving("10.200.0.7")
    assert await checked_address("hooks.internal", 8443, allow, resolve=internal)
    assert await checked_address("::1", 9000, allow)
    for host, port, resolve in (
        ("10.2.0.1", 80, None),  # outside the network
        ("hooks.internal", 8444, internal),  # another port
        ("other.internal", 8443, internal),  # another name, same address
        ("::1", 9001, None),
        ("169.254.169.254", 80, None),
    ):
        with pytest.raises(RefusedDestination):
            if resolve is None:
                await checked_address(host, port, allow)
            else:
                await checked_address(host, port, allow, resolve=resolve)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("10.0.0.0/33", "neither a network"),
        ("10.0.0.1/8", "neither a network"),  # host bits set: a typo, not a network
        ("hooks.internal", "neither a network"),
        ("hooks.internal:0", "port"),
        ("hooks.internal:http", "port"),
        ("::1:9000:x", "neither a network"),
    ],
)
def test_an_allow_list_entry_out_of_form_is_named(value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as bad:
        parse_allow_list(value)
    assert repr(value.strip()) in str(bad.value)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://hooks.example.com/", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("http:///path", "no host"),
        ("https://user:pw@hooks.example.com/", "credentials"),
        ("http://hooks.example.com:99999/", "not a URL"),
    ],
)
def test_a_url_out_of_form_is_refused_saying_why(url: str, problem: str) -> None:
    with pytest.raises(InvalidRequest, match=problem):
        split_destination(url)


def test_the_port_is_the_schemes_unless_named() -> None:
    assert split_destination("https://Hooks.Example.com/x") == ("hooks.example.com", 443)
    assert split_destination("http://[::1]:8080/") == ("::1", 8080)
    assert split_destination("http://h/") == ("h", 80)
