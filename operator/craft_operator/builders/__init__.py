"""Pure builders: the desired Kubernetes objects for a CraftSandbox, as plain dicts.

Nothing here talks to the API or reads the clock; each function maps a sandbox (and the
operator settings) to a manifest, so it is tested without a cluster.
"""
