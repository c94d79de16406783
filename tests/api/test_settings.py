"""The API's settings: authentication off is for one developer's loopback interface."""

from __future__ import annotations

import pytest

from brainhands.api.settings import ApiSettings
from brainhands.shared.errors import ConfigurationError


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_without_keys_the_api_listens_on_a_loopback_address(host: str) -> None:
    ApiSettings(api_auth="none").check_bind(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "api.example.com", ""])
def test_without_keys_any_other_address_fails_at_start_up_naming_the_variables(
    host: str,
) -> None:
    with pytest.raises(ConfigurationError, match=r"BRAINHANDS_API_AUTH=none.*BRAINHANDS_API_HOST"):
        ApiSettings(api_auth="none").check_bind(host)
    ApiSettings(api_auth="keys").check_bind(host)  # with keys, anywhere


def test_the_openapi_document_is_off_unless_turned_on() -> None:
    assert ApiSettings().api_docs is False
