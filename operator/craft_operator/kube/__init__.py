"""Talking to the Kubernetes API: connection, a small async client, exec."""
