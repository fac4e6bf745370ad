"""Craft sandbox operator: reconciles CraftSandbox resources into per-user agent sandboxes."""

__version__ = "0.1.0"
