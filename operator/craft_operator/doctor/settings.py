"""``doctor``'s first check: the settings load as the operator loads them."""

from __future__ import annotations

from craft_operator.config import Settings, SettingsError, load_settings
from craft_operator.credentials.errors import ClusterIdMissingError
from craft_operator.credentials.factory import check_cluster_id_setting
from craft_operator.doctor.results import CheckResult, fail, ok, warn


def check_settings() -> tuple[list[CheckResult], Settings | None]:
    """Load the settings as the operator does; warn about defaults that production needs set."""
    try:
        settings = load_settings()
    except SettingsError as exc:
        return [fail("settings", str(exc), "correct the CRAFT_* variable named above")], None
    watched = ", ".join(settings.namespaces) or "all namespaces"
    metrics = f"port {settings.metrics_port}" if settings.metrics_port else "disabled"
    results = [ok("settings", f"loaded; watching {watched}; metrics {metrics}")]
    try:
        check_cluster_id_setting(settings)
    except ClusterIdMissingError as exc:
        results.append(
            fail("cluster id", str(exc), "set CRAFT_CLUSTER_ID in the operator's settings")
        )
    if settings.server_url is None:
        results.append(
            warn(
                "server URL",
                "no CRAFT_SERVER_URL: a CraftSandbox without spec.serverURL fails (NoServerURL),"
                " and spec.serverURL is allowed only where the CraftSandboxPolicy lists it in"
                " serverURLs (else PolicyDenied); a CraftSandboxPool makes no pods"
                " (NoServerURL)",
                "set CRAFT_SERVER_URL to the Onyx API URL the sandboxes use",
            )
        )
    return results, settings
