"""The CraftSandbox API: pydantic models, CRD generation and parsing."""
