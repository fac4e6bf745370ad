"""The steps of a pass over a sandbox, one module per condition (the table is ``table.py``)."""
