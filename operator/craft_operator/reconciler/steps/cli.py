"""CLIValidated: onyx-cli in the Ready pod accepts its PAT and reaches the Onyx server."""

from __future__ import annotations

import time

from craft_operator.builders.naming import SANDBOX_CONTAINER
from craft_operator.credentials.errors import CredentialsError
from craft_operator.kube.exec import ExecError
from craft_operator.metrics import ProvisioningPhase
from craft_operator.reconciler import cli_validation
from craft_operator.reconciler.step import Pass, Step, Stop
from craft_operator.reconciler.steps import credentials
from craft_operator.status import CLI_VALIDATED, ConditionState

CLI_TIMEOUT = 60.0
#: onyx-cli prints a line or two; more is not read.
CLI_MAX_OUTPUT = 1024 * 1024


async def validate_cli(p: Pass) -> Stop | None:
    """Run ``onyx-cli validate-config`` once per pod; an auth failure gets one fresh PAT."""
    s, run = p.services, p.run
    assert p.pod is not None, "the pod step runs first"
    meta = p.pod["metadata"]
    uid = meta.get("uid")
    if run.status.validated_pod_uid == uid and run.condition(CLI_VALIDATED) is not None:
        return None
    started = time.monotonic()
    try:
        result = await s.exec.run(
            meta.get("namespace", ""),
            meta["name"],
            SANDBOX_CONTAINER,
            list(cli_validation.VALIDATE_ARGV),
            timeout=CLI_TIMEOUT,
            max_output_bytes=CLI_MAX_OUTPUT,
        )
    except ExecError as exc:
        run.set(ConditionState.unknown(CLI_VALIDATED, "ExecFailed", str(exc)))
        if exc.retryable:
            run.revisit(backoff="ExecFailed")
        return None
    s.metrics.observe_phase(ProvisioningPhase.CLI_VALIDATION, time.monotonic() - started)
    reason, meaning = cli_validation.describe_exit(result.exit_code)
    if result.exit_code == cli_validation.EXIT_OK:
        run.status.validated_pod_uid = uid
        run.status.cli_auth_failures = None
        run.set(ConditionState.true(CLI_VALIDATED, reason, meaning))
        p.event("CLIValidated", meaning)
        return None
    detail = f"{meaning} (exit {result.exit_code})"
    excerpt = result.stderr_excerpt(300)
    if excerpt:
        detail += f": {excerpt}"
    if result.exit_code == cli_validation.EXIT_AUTH_FAILURE:
        await _auth_failed(p, uid, detail)
        return None
    run.set(ConditionState.false(CLI_VALIDATED, reason, detail))
    p.event(reason, detail, warning=True)
    run.revisit(backoff=reason)
    return None


async def _auth_failed(p: Pass, uid: str | None, detail: str) -> None:
    """The server refused the PAT: mint a new one once; a second refusal stops retrying."""
    run = p.run
    assert p.issued is not None
    failures = (run.status.cli_auth_failures or 0) + 1
    run.status.cli_auth_failures = failures
    if failures > 1:
        run.status.validated_pod_uid = uid
        message = f"{detail}; a freshly minted PAT was refused too, so the operator stops "
        message += "retrying until the spec changes"
        run.set(ConditionState.false(CLI_VALIDATED, "AuthFailed", message))
        p.event("AuthFailed", message, warning=True)
        return
    message = f"{detail}; minting a new PAT and replacing the pod"
    run.set(ConditionState.false(CLI_VALIDATED, "AuthFailed", message))
    p.event("AuthFailed", message, warning=True)
    try:
        await p.services.credentials.ensure(p.sandbox, rejected_pat_id=p.issued.pat_id)
    except CredentialsError as exc:
        credentials.failed(p, "CredentialsError", str(exc))
        return
    run.revisit(after=0)  # the next pass writes the new Secret and replaces the pod


STEP = Step(CLI_VALIDATED, validate_cli, keeps_failure=True)
