"""A bad flag's error is the validator's own words, without pydantic's "Value error, "."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, field_validator

from sits_observe.domain.validation import validate_settings
from sits_observe.errors import ConfigError


class _Settings(BaseModel):
    sla: str = "finance=0.015"
    count: int = 1

    @field_validator("sla")
    @classmethod
    def _pair(cls, value: str) -> str:
        if "=" not in value:
            raise ValueError(f"{value!r}: use TENANT=SECONDS")
        return value


def test_a_validators_message_reads_without_pydantics_prefix() -> None:
    with pytest.raises(ConfigError) as raised:
        validate_settings(_Settings, {"sla": "abc"}, what="tenants")
    assert str(raised.value) == "invalid tenants settings: --sla: 'abc': use TENANT=SECONDS"


def test_each_bad_flag_is_named_once() -> None:
    with pytest.raises(ConfigError) as raised:
        validate_settings(_Settings, {"sla": "abc", "count": "many"}, what="tenants")
    message = str(raised.value)
    assert message.startswith("invalid tenants settings: --sla: 'abc': use TENANT=SECONDS; ")
    assert "--count: Input should be a valid integer" in message
    assert "Value error" not in message
