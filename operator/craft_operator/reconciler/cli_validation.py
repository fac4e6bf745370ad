"""What an ``onyx-cli validate-config`` exit code means (see REFERENCE.md, onyx-cli)."""

from __future__ import annotations

VALIDATE_ARGV = ("onyx-cli", "validate-config")
EXIT_OK = 0
EXIT_AUTH_FAILURE = 4

#: Exit code -> (condition reason, what it means for on-call).
EXIT_MEANINGS: dict[int, tuple[str, str]] = {
    0: ("Validated", "onyx-cli reached the Onyx server and the PAT was accepted"),
    1: ("CLIError", "onyx-cli failed with a general error"),
    2: ("BadRequest", "the Onyx server rejected onyx-cli's request as malformed"),
    3: ("NotConfigured", "onyx-cli found no ONYX_SERVER_URL or ONYX_PAT in the pod"),
    4: ("AuthFailed", "the Onyx server rejected the sandbox's PAT (401/403)"),
    5: ("ServerUnreachable", "the Onyx server could not be reached from the pod"),
    6: ("RateLimited", "the Onyx server rate-limited onyx-cli"),
    7: ("Timeout", "the Onyx server did not answer in time"),
    8: ("ServerError", "the Onyx server answered with a server error"),
    9: ("NotAvailable", "the Onyx server does not offer the API onyx-cli needs (404)"),
    127: ("CLIMissing", "onyx-cli is not installed in the sandbox image"),
}


#: What onyx-cli (1.4.4, the image's pin) prints when the server refuses ``GET /api/``, the
#: request it sends before any with the PAT: the server (or a firewall, WAF or allowlist
#: before it) blocks all traffic, and a new PAT would be refused as well.
BLOCKED_BEFORE_AUTH = "on base URL"
#: The condition reason for that refusal.
SERVER_REFUSED = "ServerRefused"


def refused_before_auth(code: int, stderr: str) -> bool:
    """Whether an auth failure came before the PAT was sent (see BLOCKED_BEFORE_AUTH)."""
    return code == EXIT_AUTH_FAILURE and BLOCKED_BEFORE_AUTH in stderr


def describe_exit(code: int) -> tuple[str, str]:
    """The condition reason and message for ``code``."""
    return EXIT_MEANINGS.get(code, ("CLIError", f"onyx-cli exited with code {code}"))
