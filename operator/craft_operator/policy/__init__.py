"""What a CraftSandbox may name: the platform's CraftSandboxPolicy and namespace tenancy.

- :mod:`~craft_operator.policy.models`: the CraftSandboxPolicy API (its CRD is generated);
- :mod:`~craft_operator.policy.rules`: the check, a pure function;
- :mod:`~craft_operator.reconciler.policy_step` (in the reconciler): enforcing it, the first
  step of every reconcile pass;
- :mod:`~craft_operator.policy.crd`: the CRD.

The same rules run at admission in ``manifests/policy`` (a ValidatingAdmissionPolicy whose
parameters are the same CraftSandboxPolicy object).
"""
