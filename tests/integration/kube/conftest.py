"""Fixtures for tests against the kmock Kubernetes emulator on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s_client

from sits_observe.lab.kube.emulator import KubeEmulator


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    """A fresh emulator on 127.0.0.1 and a free port, stopped after the test."""
    with KubeEmulator() as emulator:
        yield emulator


@pytest.fixture
def api(kube: KubeEmulator) -> Iterator[k8s_client.ApiClient]:
    """An official-client ``ApiClient`` pointed at the emulator."""
    client = kube.api_client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def core(api: k8s_client.ApiClient) -> k8s_client.CoreV1Api:
    """``CoreV1Api`` on the emulator."""
    return k8s_client.CoreV1Api(api)
