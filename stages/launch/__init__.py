"""launch: the host manager. Owns the accounting of the hosts in its shards, accepts or refuses
placements against it, runs tasks through an agent driver and reports their status."""
