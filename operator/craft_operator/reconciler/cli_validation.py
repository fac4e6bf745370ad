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


#: What onyx-cli (1.4.4, the image's pin; ``TestConnection`` in its ``internal/api``) prints
#: for the two exit-4 failures that are Onyx's verdict on the PAT: ``/api/me`` answered 401
#: or 403 by the Onyx backend itself. Its other exit-4 failures are not about the PAT: a 403
#: on ``/api/`` (a firewall, WAF or allowlist blocking all traffic, or an AWS load
#: balancer), or a 401/403 on ``/api/me`` from a reverse proxy (an HTML answer, or an AWS
#: load balancer's); minting a new PAT would revoke a good one for nothing.
PAT_REFUSED = ("invalid personal access token", "check that the personal access token is valid")
#: The condition reason for an exit 4 that is not Onyx refusing the PAT.
SERVER_REFUSED = "ServerRefused"


def refused_not_for_the_pat(code: int, stderr: bytes) -> bool:
    """Whether an exit 4 is not Onyx's verdict on the PAT (see :data:`PAT_REFUSED`); read
    from onyx-cli's whole stderr (an excerpt may have lost the start of its message to the
    server's answer it quotes)."""
    if code != EXIT_AUTH_FAILURE:
        return False
    text = stderr.decode(errors="replace")
    return not any(marker in text for marker in PAT_REFUSED)


def describe_exit(code: int) -> tuple[str, str]:
    """The condition reason and message for ``code``."""
    return EXIT_MEANINGS.get(code, ("CLIError", f"onyx-cli exited with code {code}"))
