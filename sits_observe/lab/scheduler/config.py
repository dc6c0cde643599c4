"""The parts of a ``KubeSchedulerConfiguration`` that the scheduler model runs.

Read from the same file a user gives kube-scheduler (``deploy/scheduler-config.yaml`` ships
ours), with the upstream defaults where a field is absent. Field names and defaults follow
``k8s.io/kube-scheduler/config/v1`` (``types.go``, ``types_pluginargs.go``) and the v1
defaulting in ``pkg/scheduler/apis/config/v1/default_plugins.go`` / ``defaults.go``:

- ``percentageOfNodesToScore``: top level and per profile (the profile's wins); 0 or absent
  means adaptive (see :func:`sits_observe.lab.scheduler.model.nodes_to_find`);
- score plugins: ``NodeResourcesFit`` (weight 1; ``scoringStrategy`` ``LeastAllocated`` by
  default, ``MostAllocated`` also modelled, over ``cpu`` and ``memory`` with weight 1 each)
  and ``NodeResourcesBalancedAllocation`` (weight 1, ``cpu`` and ``memory``). The other
  default score plugins (TaintToleration, NodeAffinity, PodTopologySpread, InterPodAffinity,
  ImageLocality) give every node of a cluster without taints, preferences, spread constraints
  or images the same score, so they change no ranking and are not modelled; a profile that
  disables one of the two modelled plugins (``plugins.score.disabled``) is honoured;
- ``extenders``: ``urlPrefix``, ``filterVerb``, ``prioritizeVerb``, ``bindVerb``, ``weight``,
  ``nodeCacheCapable``, ``managedResources`` (names), ``ignorable``, ``httpTimeout``.

Only the first profile is read (the one GPU pods use in ``deploy/``). Anything malformed is a
:class:`ConfigError` naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import yaml

from sits_observe.errors import ConfigError

FIT = "NodeResourcesFit"
BALANCED = "NodeResourcesBalancedAllocation"
Strategy = Literal["LeastAllocated", "MostAllocated"]


@dataclass(frozen=True)
class ResourceWeight:
    """A resource a scoring plugin looks at, and its weight."""

    name: str
    weight: int = 1


DEFAULT_RESOURCES: tuple[ResourceWeight, ...] = (ResourceWeight("cpu"), ResourceWeight("memory"))


@dataclass(frozen=True)
class ExtenderConfig:
    """One ``extenders`` entry (``k8s.io/kube-scheduler/config/v1.Extender``)."""

    url_prefix: str
    filter_verb: str = ""
    prioritize_verb: str = ""
    bind_verb: str = ""
    weight: int = 1
    node_cache_capable: bool = False
    managed_resources: tuple[str, ...] = ()
    ignorable: bool = False
    http_timeout_s: float = 30.0

    def interested(self, resource_names: frozenset[str]) -> bool:
        """``IsInterested``: no managed resources, or the pod requests or limits one."""
        return not self.managed_resources or bool(resource_names & set(self.managed_resources))


@dataclass(frozen=True)
class SchedulerConfig:
    """What the model needs of one scheduler profile and its extenders."""

    percentage_of_nodes_to_score: int = 0
    fit_strategy: Strategy = "LeastAllocated"
    fit_resources: tuple[ResourceWeight, ...] = DEFAULT_RESOURCES
    balanced_resources: tuple[ResourceWeight, ...] = DEFAULT_RESOURCES
    plugin_weights: Mapping[str, int] = field(default_factory=lambda: {FIT: 1, BALANCED: 1})
    extenders: tuple[ExtenderConfig, ...] = ()
    source: str = "kube-scheduler defaults"

    def without_extenders(self) -> SchedulerConfig:
        """The same profile with no extender (kube-scheduler as shipped)."""
        return replace(self, extenders=(), source=f"{self.source}, extenders removed")

    def pointed_at(self, service_url: str, *, serves_bind: bool = True) -> SchedulerConfig:
        """The same profile with every extender's ``urlPrefix`` moved to ``service_url`` (its
        path kept) and the ``bindVerb`` dropped unless the service binds."""
        base = urlsplit(service_url)
        extenders = tuple(
            replace(
                e,
                url_prefix=urlunsplit(
                    (base.scheme, base.netloc, urlsplit(e.url_prefix).path, "", "")
                ).rstrip("/"),
                bind_verb=e.bind_verb if serves_bind else "",
            )
            for e in self.extenders
        )
        return replace(self, extenders=extenders, source=f"{self.source} ({service_url})")


def load_scheduler_config(path: str | Path) -> SchedulerConfig:
    """Read a ``KubeSchedulerConfiguration`` YAML file."""
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read scheduler configuration {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"scheduler configuration {path} is not YAML: {exc}") from exc
    if not isinstance(document, Mapping):
        raise ConfigError(f"scheduler configuration {path} is not a YAML mapping")
    return parse_scheduler_config(document, source=str(path))


def parse_scheduler_config(document: Mapping[str, Any], *, source: str = "") -> SchedulerConfig:
    """The model's view of a parsed ``KubeSchedulerConfiguration`` document."""
    kind = document.get("kind")
    if kind != "KubeSchedulerConfiguration":
        raise ConfigError(f"{source}: kind is {kind!r}, want KubeSchedulerConfiguration")
    percentage = _int(document, "percentageOfNodesToScore", 0, source)
    profiles = document.get("profiles") or [{}]
    if not isinstance(profiles, list) or not isinstance(profiles[0], Mapping):
        raise ConfigError(f"{source}: profiles must be a list of mappings")
    profile = profiles[0]
    if profile.get("percentageOfNodesToScore") is not None:
        percentage = _int(profile, "percentageOfNodesToScore", 0, source)
    if not 0 <= percentage <= 100:
        raise ConfigError(f"{source}: percentageOfNodesToScore {percentage} is not 0-100")
    weights, strategy, fit_resources, balanced_resources = _plugins(profile, source)
    extenders = tuple(_extender(e, source) for e in document.get("extenders") or ())
    return SchedulerConfig(
        percentage, strategy, fit_resources, balanced_resources, weights, extenders, source
    )


def _plugins(
    profile: Mapping[str, Any], source: str
) -> tuple[dict[str, int], Strategy, tuple[ResourceWeight, ...], tuple[ResourceWeight, ...]]:
    weights = {FIT: 1, BALANCED: 1}
    score = ((profile.get("plugins") or {}).get("score")) or {}
    for entry in score.get("disabled") or ():
        name = entry.get("name")
        if name == "*":
            weights = {}
        else:
            weights.pop(name, None)
    for entry in score.get("enabled") or ():
        name = entry.get("name")
        if name in (FIT, BALANCED):
            weights[name] = _int(entry, "weight", 1, source) or 1
    strategy: Strategy = "LeastAllocated"
    fit_resources = balanced_resources = DEFAULT_RESOURCES
    for config in profile.get("pluginConfig") or ():
        args = config.get("args") or {}
        if config.get("name") == FIT:
            scoring = args.get("scoringStrategy") or {}
            kind = scoring.get("type", "LeastAllocated")
            if kind not in ("LeastAllocated", "MostAllocated"):
                raise ConfigError(
                    f"{source}: NodeResourcesFit scoringStrategy {kind!r} is not modelled; "
                    "use LeastAllocated or MostAllocated"
                )
            strategy = kind
            fit_resources = _resources(scoring.get("resources"), source) or DEFAULT_RESOURCES
        elif config.get("name") == BALANCED:
            balanced_resources = _resources(args.get("resources"), source) or DEFAULT_RESOURCES
    return weights, strategy, fit_resources, balanced_resources


def _resources(entries: object, source: str) -> tuple[ResourceWeight, ...]:
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: scoring resources must be a list of {{name, weight}}")
    return tuple(ResourceWeight(str(e["name"]), _int(e, "weight", 1, source)) for e in entries)


def _extender(entry: Mapping[str, Any], source: str) -> ExtenderConfig:
    if not isinstance(entry, Mapping) or not entry.get("urlPrefix"):
        raise ConfigError(f"{source}: every extender needs a urlPrefix")
    managed = tuple(str(m["name"]) for m in entry.get("managedResources") or ())
    weight = _int(entry, "weight", 1, source)
    if entry.get("prioritizeVerb") and weight <= 0:
        raise ConfigError(f"{source}: extender weight must be positive, got {weight}")
    return ExtenderConfig(
        url_prefix=str(entry["urlPrefix"]).rstrip("/"),
        filter_verb=str(entry.get("filterVerb") or ""),
        prioritize_verb=str(entry.get("prioritizeVerb") or ""),
        bind_verb=str(entry.get("bindVerb") or ""),
        weight=weight,
        node_cache_capable=bool(entry.get("nodeCacheCapable", False)),
        managed_resources=managed,
        ignorable=bool(entry.get("ignorable", False)),
        http_timeout_s=_duration_s(entry.get("httpTimeout", "30s"), source),
    )


def _int(mapping: Mapping[str, Any], key: str, default: int, source: str) -> int:
    value = mapping.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{source}: {key} must be an integer, got {value!r}")
    return value


_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration_s(value: object, source: str) -> float:
    """A Go duration (``2s``, ``500ms``, ``1m30s``) in seconds."""
    text = str(value).strip()
    parts = _GO_DURATION.findall(text)
    if not parts or _GO_DURATION.sub("", text):
        raise ConfigError(f"{source}: httpTimeout {value!r} is not a duration like 2s or 500ms")
    return sum(float(n) * _UNIT_S[u] for n, u in parts)
