"""Peloton's v0 ResourceManager (peloton.api.v0.respool): the pool tree created, read, looked up,
queried, updated and deleted through the HTTP API's respool routes (pool_shapes.py). A pool's id
is its path ("root" for /). As Peloton's resource manager does, an error the response has a field
for is answered there; a refusal (only administrators change pools) and any other error is a
gRPC status."""

from __future__ import annotations

from peloton.api.v0.respool import respool_pb2
from pelotonctl import admin
from pelotonctl.api.rpc import convert
from pelotonctl.api.rpc import pool_shapes as pools
from pelotonctl.api.rpc.calls import Call
from pelotonctl.api.rpc.catalog import served

SERVICE = "peloton.api.v0.respool.ResourceManager"


@served(f"{SERVICE}/CreateResourcePool")
def create(call: Call, request: respool_pb2.CreateRequest) -> respool_pb2.CreateResponse:
    """A new pool at its parent's path and its name (config.parent, config.name)."""
    response = respool_pb2.CreateResponse()
    path = ""
    try:
        path = pools.created_path(request.config)
        pools.create(call, path, request.config)
    except admin.AlreadyExists as exc:
        response.error.alreadyExists.id.value, response.error.alreadyExists.message = convert.pool_id(path), str(exc)
        return response
    except admin.UserError as exc:
        error = response.error.invalidResourcePoolConfig
        error.id.value, error.message = (convert.pool_id(path) if path else ""), str(exc)
        return response
    response.result.value = convert.pool_id(path)
    return response


@served(f"{SERVICE}/GetResourcePool")
def get(call: Call, request: respool_pb2.GetRequest) -> respool_pb2.GetResponse:
    """The pool (the root if no id is given), with its direct children's if asked."""
    response = respool_pb2.GetResponse()
    try:
        path, tree = pools.read(call, request.id.value)
    except admin.NotFound as exc:
        response.error.notFound.id.value = request.id.value or convert.ROOT_POOL_ID
        response.error.notFound.message = str(exc)
        return response
    pools.pool_info(tree, path, response.poolinfo)
    if request.includeChildPools:
        for child in tree.children(path):
            pools.pool_info(tree, child, response.childPools.add())
    return response


@served(f"{SERVICE}/Query")
def query(call: Call, _request: respool_pb2.QueryRequest) -> respool_pb2.QueryResponse:
    """Every pool, the root first (Peloton's QueryRequest has no filters yet)."""
    tree = pools.read_all(call)
    response = respool_pb2.QueryResponse()
    for path in tree.paths():
        pools.pool_info(tree, path, response.resourcePools.add())
    return response


@served(f"{SERVICE}/LookupResourcePoolID")
def lookup(call: Call, request: respool_pb2.LookupRequest) -> respool_pb2.LookupResponse:
    """A pool's id by its path (the id is the path; / is root)."""
    response = respool_pb2.LookupResponse()
    try:
        response.id.value = pools.lookup(call, request.path.value)
    except pools.InvalidPath as exc:
        response.error.invalidPath.path.CopyFrom(request.path)
        response.error.invalidPath.message = exc.detail
    except admin.NotFound as exc:
        response.error.notFound.path.CopyFrom(request.path)
        response.error.notFound.message = str(exc)
    return response


@served(f"{SERVICE}/UpdateResourcePool")
def update(call: Call, request: respool_pb2.UpdateRequest) -> respool_pb2.UpdateResponse:
    """The pool's config replaced; Force stores it even if it breaks a rule of the tree."""
    response = respool_pb2.UpdateResponse()
    try:
        pools.update(call, convert.pool_path(request.id.value), request.config, request.Force)
    except admin.NotFound as exc:
        response.error.notFound.id.CopyFrom(request.id)
        response.error.notFound.message = str(exc)
    except admin.UserError as exc:
        response.error.invalidResourcePoolConfig.id.CopyFrom(request.id)
        response.error.invalidResourcePoolConfig.message = str(exc)
    return response


@served(f"{SERVICE}/DeleteResourcePool")
def delete(call: Call, request: respool_pb2.DeleteRequest) -> respool_pb2.DeleteResponse:
    """An empty leaf pool deleted: isNotLeaf for a pool with children, isBusy for one with jobs
    not ended, notFound for none, notDeleted for the root."""
    response = respool_pb2.DeleteResponse()
    pool_id = convert.pool_id(convert.pool_path(request.path.value))
    try:
        pools.delete(call, request.path.value)
    except pools.NotLeaf as exc:
        response.error.isNotLeaf.id.value, response.error.isNotLeaf.message = pool_id, exc.detail
    except pools.Busy as exc:
        response.error.isBusy.id.value, response.error.isBusy.message = pool_id, exc.detail
    except admin.NotFound as exc:
        response.error.notFound.path.CopyFrom(request.path)
        response.error.notFound.message = str(exc)
    except admin.UserError as exc:
        response.error.notDeleted.id.value, response.error.notDeleted.message = pool_id, str(exc)
    return response
