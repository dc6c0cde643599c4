"""Fragmentation trend clustering: group GPUs (or nodes) by how their memory occupancy moves.

Pipeline (each step a pure function):

1. series: :mod:`.trends_series` (framebuffer occupancy per GPU or node, bucketed);
2. features: :mod:`.trends_features` (level, slope per hour, residual spread, daily
   amplitude, sharp drops per hour);
3. scaling: scikit-learn ``StandardScaler`` (each feature to mean 0, variance 1), with each
   feature's scale floored at the smallest difference that matters (:data:`SCALE_FLOORS`);
4. eps: unless given, the knee of the sorted k-distance curve, k = ``min_samples`` (the
   distance to the ``min_samples``-th nearest series counting the series itself, i.e. the
   smallest eps at which that series would be a DBSCAN core point; Ester et al., KDD 1996,
   section 4.2). The knee is the point of the ascending curve farthest from the chord joining
   its first and last points, both axes scaled to 0-1 ("kneedle"-style, Satopaa et al.
   2011, without smoothing). A curve with no clear knee (it rises evenly: no series stands
   apart) gives the largest k-distance instead, so that no series is called noise; and eps
   is never below the resolution (:func:`resolution_eps`), one floor of the most spread
   feature;
5. DBSCAN (scikit-learn) on the scaled features;
6. words: each series is described with fixed thresholds (:class:`~.settings.TrendSettings`),
   e.g. "leaking", "saw-tooth", "daily cycle", "flat"; a cluster carries the words that at
   least :data:`WORD_QUORUM` of its members earn on their own ("mixed" when none does), so a
   group of flat series with a few leaking ones is never called leaking because its mean
   rises. When the k-distance curve has no knee and DBSCAN puts every series in one group,
   the answer says there is no structure to find rather than naming a pattern.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.trends.features import FEATURES, TrendFeatures, series_features
from sits_observe.analytics.trends.series import OccupancySeries, TrendLevel
from sits_observe.analytics.trends.settings import TrendSettings

FloatArray = npt.NDArray[np.float64]

#: Share of a cluster's members that must earn a word (on their own features) for the cluster
#: to carry it.
WORD_QUORUM = 2 / 3
#: Every word :func:`describe` gives, strongest pattern first (the order clusters list them).
WORD_ORDER = (
    "idle/empty",
    "saw-tooth",
    "leaking",
    "draining",
    "daily cycle",
    "flat",
    "erratic",
    "full",
)

#: eps used when every k-distance is 0 (identical series): groups exact duplicates only.
MIN_EPS = 1e-6
#: Fewer series than this have no k-distance curve worth a knee.
MIN_SERIES_FOR_KNEE = 3
#: The smallest difference that matters in each feature (same order as FEATURES): the scaler
#: never divides by less, so a feature that only carries measurement noise (say every GPU
#: has a residual spread of 0.2 +/- 0.01 pp) is not blown up to unit variance and allowed to
#: split groups that differ in nothing else. 1 pp of level, 0.1 pp/h of slope, 0.5 pp of
#: residual spread, 1 pp of daily swing, one sharp drop per 20 h.
SCALE_FLOORS = (0.01, 0.001, 0.005, 0.01, 0.05)


@dataclass(frozen=True)
class EpsChoice:
    """How eps was chosen.

    ``source``: ``given`` (by the user), ``knee`` (k-distance at the knee), ``no_knee`` (the
    curve has no clear knee: the largest k-distance) or ``fallback`` (too few or identical
    series). ``knee_strength`` is 0 for a straight k-distance curve, 1 for an L.
    """

    eps: float
    source: str
    k: int
    knee_index: int | None
    knee_strength: float
    k_distances: FloatArray  # ascending; empty unless the curve was computed


@dataclass(frozen=True)
class SeriesPoint:
    """One series with its features (feature name -> value in the feature's unit)."""

    key: str
    node: str
    features: dict[str, float]
    points: int
    span_h: float


@dataclass(frozen=True)
class TrendCluster:
    """One DBSCAN cluster: its centroid (mean features), words and members; ``member_words``
    are the words each member earns on its own (in ``members``' order), so a member that does
    not share the cluster's words can say so."""

    label: int
    words: tuple[str, ...]
    description: str
    centroid: dict[str, float]
    members: tuple[SeriesPoint, ...]
    member_words: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class TrendClusters:
    """The whole answer of :func:`cluster_trends`.

    ``noise`` lists the series DBSCAN left out of every cluster, each described in words
    like a cluster of one. ``dropped`` counts series (and points) left out before clustering,
    by reason; ``dropped_keys`` names those series. ``notes`` are sentences for the reader
    (small fleets, eps fallbacks, ...).
    """

    level: TrendLevel
    bucket_s: int
    n_series: int
    eps: EpsChoice
    min_samples: int
    clusters: tuple[TrendCluster, ...]
    noise: tuple[TrendCluster, ...]
    dropped: dict[str, int]
    dropped_keys: tuple[str, ...]
    notes: tuple[str, ...]


def knee(curve: FloatArray) -> tuple[int, float]:
    """The knee of an ascending curve: ``(index, strength)``.

    Both axes are scaled to 0-1 and the knee is the point farthest below the chord joining the
    first and last points (the usual k-distance curve is convex: flat, then rising steeply).
    ``strength`` is that distance in the scaled axes, times sqrt(2) so that it runs from 0
    (a straight line) to 1 (an L). If no point lies below the chord, the farthest point on
    either side is taken, with strength 0. A flat or too short curve gives ``(0, 0.0)``.
    """
    y = np.asarray(curve, dtype=np.float64)
    if y.size < 3 or y[-1] == y[0]:
        return 0, 0.0
    x = np.linspace(0.0, 1.0, y.size)
    below = x - (y - y[0]) / (y[-1] - y[0])  # sqrt(2) x the distance below the chord y = x
    if below.max() > 0:
        index = int(np.argmax(below))
        return index, float(below[index])
    return int(np.argmax(np.abs(below))), 0.0


def knee_index(curve: FloatArray) -> int:
    """Index of the knee of an ascending curve (see :func:`knee`)."""
    return knee(curve)[0]


def choose_eps(
    scaled: FloatArray,
    min_samples: int,
    given: float | None = None,
    *,
    min_knee_strength: float = 0.5,
    min_eps: float = 0.0,
) -> EpsChoice:
    """eps for DBSCAN: ``given`` when set, else from the k-distance curve.

    With a clear knee (strength at least ``min_knee_strength``) eps is the k-distance at the
    knee: the series beyond it stand apart and become noise. Without one (the curve rises
    evenly: no series is much farther from its neighbours than the others), eps is the
    largest k-distance, so every series is a core point and clusters are the groups that lie
    farther apart than that. Either is raised to ``min_eps`` (source ``resolution``): series
    closer than that differ by less than matters (see :func:`resolution_eps`).
    """
    if given is not None:
        return EpsChoice(float(given), "given", min_samples, None, 0.0, np.zeros(0))
    n = scaled.shape[0]
    k = min(min_samples, n)
    if n < 2 or k < 2:
        return EpsChoice(max(1.0, min_eps), "fallback", k, None, 0.0, np.zeros(0))
    # scikit-learn is imported where it is used: it costs ~1.5 s, paid by every CLI
    # start (serve included) if imported with this module (bench_extender_cold_start).
    from sklearn.neighbors import NearestNeighbors

    distances, _ = NearestNeighbors(n_neighbors=k).fit(scaled).kneighbors(scaled)
    kdist = np.sort(distances[:, -1])
    index, strength = knee(kdist)
    source = "knee"
    if strength < min_knee_strength:
        index, source = kdist.size - 1, "no_knee"
    # A hair above the chosen distance, so that the series defining it count as core points
    # despite rounding between the neighbour search here and DBSCAN's own.
    eps = float(kdist[index]) * (1.0 + 1e-9)
    if eps <= 0.0:
        eps, source = MIN_EPS, "fallback"
    if eps < min_eps:
        eps, source = min_eps, "resolution"
    return EpsChoice(eps, source, k, index, strength, kdist)


def resolution_eps(matrix: FloatArray) -> float:
    """The smallest difference that matters, in the units :func:`scale_features` gives.

    Per feature that is ``floor / scale`` (1 where the fleet spreads less than the floor,
    less where it spreads more); the smallest over the features is taken, so two series
    within it differ by less than one floor in the feature where the fleet spreads most.
    """
    if matrix.shape[0] == 0:
        return 0.0
    floors = np.asarray(SCALE_FLOORS)
    scale = np.maximum(matrix.std(axis=0), floors)
    return float(np.min(floors / scale))


def default_min_samples(n_series: int, n_features: int = len(FEATURES)) -> int:
    """``n_series // 10`` clamped to 3 .. 2 x features (never more than the series)."""
    return max(1, min(n_series, max(3, min(2 * n_features, n_series // 10))))


def describe(centroid: dict[str, float], settings: TrendSettings) -> tuple[str, ...]:
    """Words for a centroid (feature name -> value), strongest pattern first."""
    words: list[str] = []
    if centroid["level"] < settings.idle_level_ratio and (
        centroid["slope_per_h"] < settings.leak_slope_per_h
    ):
        return ("idle/empty",)
    if centroid["drops_per_h"] >= settings.sawtooth_drops_per_h:
        words.append("saw-tooth")
    if centroid["slope_per_h"] >= settings.leak_slope_per_h:
        words.append("leaking")
    elif centroid["slope_per_h"] <= -settings.leak_slope_per_h:
        words.append("draining")
    if centroid["daily_amplitude"] >= settings.daily_amplitude_ratio:
        words.append("daily cycle")
    if not words:
        flat = centroid["resid_std"] < settings.steady_std_ratio
        words.append("flat" if flat else "erratic")
    if centroid["level"] >= settings.full_level_ratio:
        words.append("full")
    return tuple(words)


def cluster_words(member_words: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The words at least :data:`WORD_QUORUM` of a cluster's members earn, in
    :data:`WORD_ORDER`; ``("mixed",)`` when no word is shared that widely."""
    counts = Counter(w for words in member_words for w in set(words))
    need = WORD_QUORUM * len(member_words)
    shared = tuple(w for w in WORD_ORDER if counts[w] >= need)
    return shared or ("mixed",)


def _sentence(words: tuple[str, ...], c: dict[str, float]) -> str:
    parts = [
        f"{', '.join(words)}: {100 * c['level']:.1f}% of framebuffer used on average",
        f"{100 * c['slope_per_h']:+.2f} pp/h",
        f"residual sd {100 * c['resid_std']:.1f} pp",
    ]
    if c["daily_amplitude"] > 0:
        parts.append(f"daily swing ±{100 * c['daily_amplitude']:.1f} pp")
    parts.append(f"{c['drops_per_h']:.2f} sharp drops/h")
    return "; ".join(parts)


def scale_features(matrix: FloatArray) -> FloatArray:
    """StandardScaler, with each feature's scale floored at :data:`SCALE_FLOORS`."""
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(matrix)
    scaler.scale_ = np.maximum(scaler.scale_, np.asarray(SCALE_FLOORS))
    scaled: FloatArray = scaler.transform(matrix)
    return scaled


def cluster_features(
    features: TrendFeatures,
    keys: tuple[str, ...],
    nodes: tuple[str, ...],
    *,
    level: TrendLevel = TrendLevel.gpu,
    bucket_s: int = 60,
    settings: TrendSettings | None = None,
) -> TrendClusters:
    """Scale, choose eps, run DBSCAN and describe the clusters of ``features``.

    ``keys`` / ``nodes`` name the series codes of ``features`` (code ``i`` -> ``keys[i]``).
    """
    settings = settings or TrendSettings()
    notes: list[str] = []
    n = features.n_series
    dropped_keys = tuple(keys[int(c)] for c in features.dropped_codes)
    dropped = dict(features.dropped)
    if dropped:
        notes.append(
            "left out before clustering: "
            + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sorted(dropped.items()))
        )
    min_samples = settings.min_samples or default_min_samples(n)
    if n == 0:
        notes.append("no series with enough points to cluster")
        return TrendClusters(
            level=level,
            bucket_s=bucket_s,
            n_series=0,
            eps=EpsChoice(0.0, "fallback", 0, None, 0.0, np.zeros(0)),
            min_samples=min_samples,
            clusters=(),
            noise=(),
            dropped=dropped,
            dropped_keys=dropped_keys,
            notes=tuple(notes),
        )
    scaled = scale_features(features.matrix)
    floor = resolution_eps(features.matrix)
    if n < MIN_SERIES_FOR_KNEE and settings.eps is None:
        notes.append(
            f"only {n} series: too few to estimate a density, so each series is described "
            "on its own (series closer than the smallest differences that matter group)"
        )
        min_samples = 1
        eps = EpsChoice(max(MIN_EPS, floor), "fallback", 1, None, 0.0, np.zeros(0))
    else:
        if n < min_samples:
            notes.append(f"only {n} series, fewer than min_samples={min_samples}: lowered to {n}")
            min_samples = n
        eps = choose_eps(
            scaled,
            min_samples,
            settings.eps,
            min_knee_strength=settings.min_knee_strength,
            min_eps=floor,
        )
        if eps.source == "resolution":
            notes.append(
                f"eps raised to {floor:.3g}: series closer than that differ by less than the "
                "smallest differences that matter (SCALE_FLOORS)"
            )
    from sklearn.cluster import DBSCAN

    labels = DBSCAN(eps=eps.eps, min_samples=min_samples).fit_predict(scaled)

    def point(i: int) -> SeriesPoint:
        code = int(features.codes[i])
        return SeriesPoint(
            key=keys[code],
            node=nodes[code],
            features={f: float(v) for f, v in zip(FEATURES, features.matrix[i], strict=True)},
            points=int(features.points[i]),
            span_h=float(features.span_h[i]),
        )

    def cluster(label: int, rows: npt.NDArray[np.int64]) -> TrendCluster:
        centroid = {
            f: float(v) for f, v in zip(FEATURES, features.matrix[rows].mean(axis=0), strict=True)
        }
        members = tuple(point(int(i)) for i in rows)
        own = tuple(describe(m.features, settings) for m in members)
        words = cluster_words(list(own))
        return TrendCluster(
            label=label,
            words=words,
            description=_sentence(words, centroid),
            centroid=centroid,
            members=members,
            member_words=own,
        )

    found = sorted(set(labels.tolist()) - {-1})
    clusters = [cluster(lab, np.flatnonzero(labels == lab)) for lab in found]
    clusters.sort(key=lambda c: (-len(c.members), c.label))
    if (
        eps.source == "no_knee"
        and len(clusters) == 1
        and len(clusters[0].members) == n
        and n >= MIN_SERIES_FOR_KNEE
    ):
        notes.append(
            f"no structure: the {n} series do not separate into groups (the k-distance curve "
            "rises evenly, no knee), so they form one cluster; its words are those most of "
            "its members earn on their own"
        )
    noise = tuple(cluster(-1, np.array([i])) for i in np.flatnonzero(labels == -1))
    return TrendClusters(
        level=level,
        bucket_s=bucket_s,
        n_series=n,
        eps=eps,
        min_samples=min_samples,
        clusters=tuple(clusters),
        noise=noise,
        dropped=dropped,
        dropped_keys=dropped_keys,
        notes=tuple(notes),
    )


def cluster_trends(series: OccupancySeries, settings: TrendSettings | None = None) -> TrendClusters:
    """Features of ``series`` then :func:`cluster_features` (the whole pipeline)."""
    settings = settings or TrendSettings()
    features = series_features(
        series.codes,
        series.t_s,
        series.values,
        drop_ratio=settings.drop_ratio,
        min_points=settings.min_points,
    )
    return cluster_features(
        features,
        series.keys,
        series.nodes,
        level=series.level,
        bucket_s=series.bucket_s,
        settings=settings,
    )


def cluster_sizes(result: TrendClusters) -> Counter[str]:
    """Members per description, noise under ``noise`` (handy for summaries and tests)."""
    sizes: Counter[str] = Counter()
    for c in result.clusters:
        sizes[", ".join(c.words)] += len(c.members)
    sizes["noise"] += len(result.noise)
    return sizes
