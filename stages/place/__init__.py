"""place: the placement engine. Picks hosts for admitted gangs, all or nothing, from a shared
view of host state, and sends each placement to the host shard that owns the host."""
