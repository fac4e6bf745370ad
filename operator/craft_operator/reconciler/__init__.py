"""Level-triggered reconciliation of CraftSandboxes: a work queue and the reconcile logic."""
