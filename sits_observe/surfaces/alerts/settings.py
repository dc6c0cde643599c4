"""Typed settings of alerting: rule thresholds (:class:`AlertSettings`) and delivery
(:class:`NotifySettings`), combined in :class:`AlertingSettings` for ``serve``.

The thresholds feed both the in-process evaluator and the generated Prometheus rules file
(grafana/alerts/sits-observe.rules.yml is generated from the defaults), so a change here is
a change in both places. Every duration is in seconds; the Prometheus file writes them as
Prometheus durations (``900`` -> ``15m``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from sits_observe.errors import ConfigError

DAY_S = 86400.0
#: docs/alerts.md of the released tree: each rule's ``runbook_url`` is this + ``#<name>``
#: (the anchor GitHub gives the rule's heading under "Runbooks").
DEFAULT_RUNBOOK_BASE_URL = "https://github.com/example/sits-observe/blob/main/docs/alerts.md"


class AlertSettings(BaseModel):
    """Thresholds and ``for`` durations of the alert rules (see docs/alerts.md)."""

    model_config = ConfigDict(frozen=True)

    fragmentation_ratio_max: float = Field(
        0.5,
        gt=0,
        le=1,
        description="FGD fragmentation ratio (0-1, share of free GPU capacity that no typical "
        "pod can use) above which SitsFragmentationHigh fires",
    )
    fragmentation_for_s: float = Field(
        900.0, ge=0, le=DAY_S, description="seconds the fragmentation must stay high"
    )
    latency_for_s: float = Field(
        300.0, ge=0, le=DAY_S, description="seconds P95 latency must stay over the model's SLO"
    )
    throughput_for_s: float = Field(
        300.0,
        ge=0,
        le=DAY_S,
        description="seconds throughput must stay above the model's safe maximum",
    )
    collector_stale_s: float = Field(
        300.0,
        gt=0,
        le=DAY_S,
        description="seconds without a new sample from a node and source before "
        "SitsCollectorDown fires",
    )
    collector_for_s: float = Field(
        60.0, ge=0, le=DAY_S, description="seconds a collector must stay silent past the limit"
    )
    runbook_base_url: str = Field(
        DEFAULT_RUNBOOK_BASE_URL,
        min_length=1,
        max_length=500,
        pattern=r"^https?://[^\s#]+$",
        description="URL of docs/alerts.md (no #fragment); every rule's runbook_url is this "
        "with #<alert name in lower case>, its section under Runbooks",
    )
    scrape_job_regex: str = Field(
        "sits.*",
        min_length=1,
        description="Prometheus job names (regex) whose `up == 0` fires SitsScrapeTargetDown "
        "(Prometheus rules file only)",
    )
    target_down_for_s: float = Field(
        300.0, ge=0, le=DAY_S, description="seconds a scrape target must stay down"
    )
    controller_stale_s: float = Field(
        1800.0,
        gt=0,
        le=7 * DAY_S,
        description="seconds without a controller decision before SitsControllerStuck fires",
    )
    controller_for_s: float = Field(
        0.0, ge=0, le=DAY_S, description="seconds the controller must stay silent past the limit"
    )
    controller_errors_window_s: float = Field(
        600.0,
        ge=60,
        le=DAY_S,
        description="seconds over which an increase of sits_controller_errors_total fires "
        "SitsControllerErrors",
    )
    controller_errors_for_s: float = Field(
        0.0, ge=0, le=DAY_S, description="seconds the controller errors must keep increasing"
    )


class NotifySettings(BaseModel):
    """Where alerts go and how hard delivery tries."""

    model_config = ConfigDict(frozen=True)

    alertmanager_url: str | None = Field(
        None,
        description="Alertmanager base URL (alerts are POSTed to /api/v2/alerts)",
        json_schema_extra={"flag": "--alertmanager-url"},
    )
    webhook_urls: tuple[str, ...] = Field(
        (),
        description="URL that receives Alertmanager webhook JSON (version 4), signed; repeatable",
        json_schema_extra={"flag": "--alert-webhook-url"},
    )
    webhook_secret: SecretStr | None = Field(
        None, description="HMAC-SHA256 key for the webhook signature (or webhook_secret_file)"
    )
    webhook_secret_file: Path | None = Field(
        None, description="file holding the webhook HMAC key (whitespace around it is ignored)"
    )
    resend_interval_s: float = Field(
        60.0,
        gt=0,
        le=DAY_S,
        description="seconds between re-sends of a firing alert to Alertmanager",
    )
    webhook_repeat_interval_s: float = Field(
        4 * 3600.0,
        ge=0,
        le=7 * DAY_S,
        description="seconds between repeats of a still-firing alert to a webhook (0 = never)",
    )
    timeout_s: float = Field(
        5.0, gt=0, le=120, description="seconds one HTTP attempt may take before it is retried"
    )
    max_attempts: int = Field(
        5, ge=1, le=20, description="most HTTP attempts per notification (5xx, timeouts)"
    )
    backoff_base_s: float = Field(
        0.5, gt=0, le=60, description="seconds before the first retry; doubles each retry"
    )
    backoff_max_s: float = Field(
        30.0, gt=0, le=600, description="longest wait between two attempts, in seconds"
    )
    queue_size: int = Field(
        256,
        ge=1,
        le=100_000,
        description="notifications waiting per target; more are dropped and counted",
    )
    receiver: str = Field(
        "sits-observe", min_length=1, description="receiver name in the webhook JSON"
    )
    external_url: str = Field(
        "http://127.0.0.1:8080",
        description="URL of this service, for externalURL and each alert's generatorURL",
    )

    @property
    def enabled(self) -> bool:
        """True when at least one target is configured."""
        return self.alertmanager_url is not None or bool(self.webhook_urls)

    def resolved_secret(self) -> bytes | None:
        """The webhook HMAC key (None without webhooks); raises :class:`ConfigError`."""
        if not self.webhook_urls:
            return None
        if self.webhook_secret is not None and self.webhook_secret_file is not None:
            raise ConfigError("give the webhook secret or a secret file, not both")
        if self.webhook_secret is not None:
            secret = self.webhook_secret.get_secret_value().strip()
        elif self.webhook_secret_file is not None:
            try:
                secret = self.webhook_secret_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(
                    f"cannot read webhook secret file {self.webhook_secret_file}: "
                    f"{exc.strerror or exc}"
                ) from exc
        else:
            raise ConfigError(
                "--alert-webhook-url needs --alert-webhook-secret-file: webhooks are always "
                "signed (HMAC-SHA256)"
            )
        if len(secret) < 16:
            raise ConfigError("the webhook secret must be at least 16 characters")
        return secret.encode()


class AlertingSettings(BaseModel):
    """Alerting from ``serve``: rules, delivery, and how often rules are evaluated."""

    model_config = ConfigDict(frozen=True)

    eval_interval_s: float = Field(
        15.0, gt=0, le=3600, description="seconds between two evaluations of the alert rules"
    )
    rules: AlertSettings = Field(default_factory=AlertSettings, description="rule thresholds")
    notify: NotifySettings = Field(default_factory=NotifySettings, description="delivery")
