"""The orphan sweep's premise, on a real API server: the 404 that makes a sandbox an
orphan names that CraftSandbox, and the 404s that must not (an API version the server does
not serve) do not."""

from __future__ import annotations

import json

import pytest

from craft_operator.kube.client import NotFoundError, api_error
from craft_operator.reconciler.orphan_sweep import says_the_sandbox_is_gone
from tests.support.cluster import Cluster

pytestmark = pytest.mark.cluster


def answer(cluster: Cluster, path: str) -> NotFoundError:
    """The API server's answer to a GET of ``path``, as the operator's client reads it."""
    status, body = cluster.plane.request("GET", path)
    error = api_error(status, json.dumps(body) if body is not None else "")
    assert isinstance(error, NotFoundError), f"{status}: {body}"
    return error


def test_the_api_server_s_404_for_a_deleted_sandbox_names_it(
    cluster: Cluster, namespace: str
) -> None:
    path = f"/apis/craft.onyx.app/v1alpha1/namespaces/{namespace}/craftsandboxes/never-made"
    assert says_the_sandbox_is_gone(answer(cluster, path), "never-made")
    assert not says_the_sandbox_is_gone(answer(cluster, path), "another-name")


def test_a_404_for_a_version_the_server_does_not_serve_is_not_taken_for_a_deletion(
    cluster: Cluster, namespace: str
) -> None:
    path = f"/apis/craft.onyx.app/v9/namespaces/{namespace}/craftsandboxes/never-made"
    assert not says_the_sandbox_is_gone(answer(cluster, path), "never-made")
