"""``serve``'s alerting flags -> settings: off without a target, validated, secret required."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sits_observe.errors import ConfigError
from sits_observe.surfaces.alerts.settings import AlertingSettings
from sits_observe.surfaces.cli.serve import alerting_settings


def alerting_from_flags(**values: object) -> AlertingSettings | None:
    """The settings of ``serve --alert-*`` flags given as ``field=value`` (None: not given)."""
    return alerting_settings(
        {f"alert_{name}": value for name, value in values.items()},
        external_url="http://127.0.0.1:8080",
    )


def _flags(**values: object) -> dict[str, Any]:
    return values


def test_off_without_a_target() -> None:
    assert alerting_from_flags(**_flags(eval_interval_s=5.0)) is None


def test_alertmanager_only_with_interval() -> None:
    settings = alerting_from_flags(**_flags(alertmanager_url="http://am:9093", eval_interval_s=5.0))
    assert settings is not None
    assert settings.eval_interval_s == 5.0
    assert settings.notify.alertmanager_url == "http://am:9093"
    assert settings.notify.enabled


def test_bad_interval_names_the_field() -> None:
    with pytest.raises(ConfigError, match="--alert-eval-interval-s: "):
        alerting_from_flags(**_flags(alertmanager_url="http://am", eval_interval_s=0.0))


def test_webhook_secret_file_is_read_and_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--alert-webhook-secret-file"):
        alerting_from_flags(**_flags(webhook_urls=["http://h/"]))
    short = tmp_path / "short.key"
    short.write_text("abc\n")
    with pytest.raises(ConfigError, match="at least 16"):
        alerting_from_flags(**_flags(webhook_urls=["http://h/"], webhook_secret_file=short))
    with pytest.raises(ConfigError, match="cannot read webhook secret file"):
        alerting_from_flags(
            **_flags(webhook_urls=["http://h/"], webhook_secret_file=tmp_path / "no")
        )
    good = tmp_path / "good.key"
    good.write_text("  0123456789abcdef0123  \n")
    settings = alerting_from_flags(
        **_flags(webhook_urls=["http://a/", "http://b/"], webhook_secret_file=good)
    )
    assert settings is not None
    assert settings.notify.resolved_secret() == b"0123456789abcdef0123"
    assert settings.notify.webhook_urls == ("http://a/", "http://b/")
