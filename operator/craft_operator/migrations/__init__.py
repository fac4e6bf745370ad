"""Alembic migrations of the operator's own tables (``craft_sandbox_credential``).

Run them with ``craft-operator db upgrade`` (or automatically at start). They never touch
Onyx's tables, and record their state in ``craft_operator_alembic_version``, not in
Onyx's ``alembic_version``.
"""
