"""Peloton's v1alpha ResourcePoolService (peloton.api.v1alpha.respool): v0's ResourceManager in
v1alpha's messages, every error a gRPC status as its proto says (ALREADY_EXISTS, INVALID_ARGUMENT,
NOT_FOUND, FAILED_PRECONDITION for a pool with jobs, PERMISSION_DENIED for a change by someone
who is not an administrator). A pool's id is its path ("root" for /)."""

from __future__ import annotations

from peloton.api.v0.respool import respool_pb2 as v0
from peloton.api.v1alpha.respool import respool_pb2
from peloton.api.v1alpha.respool.svc import respool_svc_pb2 as svc
from pelotonctl import admin
from pelotonctl.api.rpc import convert
from pelotonctl.api.rpc import pool_shapes as pools
from pelotonctl.api.rpc.calls import Call
from pelotonctl.api.rpc.catalog import served

SERVICE = "peloton.api.v1alpha.respool.ResourcePoolService"


def _info(tree: pools.Tree, path: str) -> respool_pb2.ResourcePoolInfo:
    return pools.recast(pools.pool_info(tree, path), respool_pb2.ResourcePoolInfo)


@served(f"{SERVICE}/CreateResourcePool")
def create(call: Call, request: svc.CreateResourcePoolRequest) -> svc.CreateResourcePoolResponse:
    """A new pool at its parent's path and its name. Peloton lets a client choose the new pool's
    id; here the id is the path, so a respool_id given must be that path."""
    config = pools.recast(request.spec, v0.ResourcePoolConfig)
    path = pools.created_path(config)
    wanted = request.respool_id.value
    if wanted and convert.pool_path(wanted) != path:
        raise admin.UserError(f"respool_id {wanted!r}: a pool's id is its path here, and this spec's is {path!r} "
                              f"(its parent's path and its name); leave respool_id out or give that")
    pools.create(call, path, config)
    return svc.CreateResourcePoolResponse(respool_id={"value": convert.pool_id(path)})


@served(f"{SERVICE}/GetResourcePool")
def get(call: Call, request: svc.GetResourcePoolRequest) -> svc.GetResourcePoolResponse:
    """A pool's config, its children and its usage now."""
    path, tree = pools.read(call, request.respool_id.value)
    response = svc.GetResourcePoolResponse(respool=_info(tree, path))
    if request.include_child_pools:
        response.child_respools.extend(_info(tree, child) for child in tree.children(path))
    return response


@served(f"{SERVICE}/QueryResourcePools")
def query(call: Call, _request: svc.QueryResourcePoolsRequest) -> svc.QueryResourcePoolsResponse:
    """Every pool of the tree."""
    tree = pools.read_all(call)
    return svc.QueryResourcePoolsResponse(respools=[_info(tree, path) for path in tree.paths()])


@served(f"{SERVICE}/LookupResourcePoolID")
def lookup(call: Call, request: svc.LookupResourcePoolIDRequest) -> svc.LookupResourcePoolIDResponse:
    """A pool's id by its path (the id is the path; / is root)."""
    return svc.LookupResourcePoolIDResponse(respool_id={"value": pools.lookup(call, request.path.value)})


@served(f"{SERVICE}/UpdateResourcePool")
def update(call: Call, request: svc.UpdateResourcePoolRequest) -> svc.UpdateResourcePoolResponse:
    """Replaces a pool's config (administrators)."""
    config = pools.recast(request.spec, v0.ResourcePoolConfig)
    pools.update(call, convert.pool_path(request.respool_id.value), config, request.Force)
    return svc.UpdateResourcePoolResponse()


@served(f"{SERVICE}/DeleteResourcePool")
def delete(call: Call, request: svc.DeleteResourcePoolRequest) -> svc.DeleteResourcePoolResponse:
    """Deletes a leaf pool with no job that has not ended (administrators)."""
    pools.delete(call, request.respool_id.value)
    return svc.DeleteResourcePoolResponse()
