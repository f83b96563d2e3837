"""Arrow schemas of the tables chunkline writes, each field described, with a schema version."""
