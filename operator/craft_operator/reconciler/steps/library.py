"""UserLibrarySynced: the user's library from S3 is in the Ready pod, at the annotated revision.

Exec mode runs the sync in the library pool (:mod:`.library_exec`), Job mode in a Job
(:mod:`.library_job`); a pass never waits for either. One sandbox's syncs never overlap;
a revision annotated while a sync runs is synced once it ends.
"""

from __future__ import annotations

from craft_operator.api.models import LibraryMode, UserLibraryStatus
from craft_operator.kube.client import ApiError
from craft_operator.library import LibraryConfigError, resolve_location
from craft_operator.reconciler.step import Pass, Step, Stop
from craft_operator.reconciler.steps import library_exec, library_job
from craft_operator.reconciler.steps.library_attempt import (
    attempt_for,
    refused_revision,
    still_current,
)
from craft_operator.status import USER_LIBRARY_SYNCED, ConditionState

#: UserLibrarySynced's reason when the API server refused a request about a sync Job.
JOB_REQUEST_FAILED = "JobRequestFailed"
NOT_CONFIGURED = "no S3 bucket in spec.userLibrary.bucket or CRAFT_S3_BUCKET: the library is empty"


async def sync_library(p: Pass) -> Stop | None:
    """Sync the library into the pod when the revision, the pod or the configuration moved."""
    assert p.pod is not None, "the pod step runs first"
    sandbox, run = p.sandbox, p.run
    try:
        location = resolve_location(
            sandbox.spec.user_library, sandbox.spec.user, p.services.settings
        )
    except LibraryConfigError:
        run.status.user_library = _jobs_only(run.status.user_library)
        run.set(ConditionState.true(USER_LIBRARY_SYNCED, "NotConfigured", NOT_CONFIGURED))
        return None
    attempt = attempt_for(sandbox, location, str(p.pod["metadata"].get("uid", "")))
    if sandbox.spec.user_library.mode == LibraryMode.JOB:
        try:
            await library_job.sync(p, location, attempt)
        except ApiError as exc:
            # A condition, an event and a retry with backoff, never the pass's end: the
            # CLI's step in this row still runs (a renewed PAT must reach the pod whatever
            # the Jobs' API answers), and the pass's status is written.
            p.fail(USER_LIBRARY_SYNCED, JOB_REQUEST_FAILED, f"cannot manage the sync Job: {exc}")
        return None
    current = run.status.user_library or UserLibraryStatus()
    if still_current(run, current, attempt) or current.failed_attempt == attempt.key:
        return None  # synced already, or its failure is reported and retrying cannot help
    if refused_revision(p, current, attempt):
        return None
    library_exec.step(p, location, attempt)
    return None


def _jobs_only(current: UserLibraryStatus | None) -> UserLibraryStatus | None:
    """Of the status, what outlives the library's configuration: the sync Job that may
    still run (collected once a bucket is back, before another starts) and the Jobs'
    numbering."""
    if current is None or (current.job is None and current.job_sequence is None):
        return None
    return UserLibraryStatus(job=current.job, job_sequence=current.job_sequence)


STEP = Step(USER_LIBRARY_SYNCED, sync_library)
