"""Active/standby replicas: kopf peering options, the peering rule, and the activity gate."""
