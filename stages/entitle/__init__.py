"""entitle: the resource manager. Holds each pool's queue of gangs and admits them within the
pool's entitlement; allocations are charged at admission and released when a run ends."""
