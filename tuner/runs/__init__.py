"""Running training runs for the search: where they go on the cluster (placement)."""
