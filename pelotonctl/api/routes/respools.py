"""Resource pools: the tree, one pool's shares and usage, and the admins' create, update and
delete. A path is normalised to one leading slash and no trailing one before anyone is asked.
The reads still answer while the store is away: the pools as the API last read them, their usage
from the entitlements and host-state views (X-Peloton-Served-From: views says so)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from pelotonctl import admin
from pelotonctl.api.door import DoorDep
from pelotonctl.api.identity import Creds
from pelotonctl.api.storeguard import answering

router = APIRouter(tags=["respools"], dependencies=[Depends(answering)])


class PoolConfig(BaseModel):
    config: str = Field(description="A Peloton respool YAML")
    force: bool = Field(False, description="update: store it even if it breaks a rule of the tree")


@router.get("/v1/respools", summary="The pool tree, every pool's config")
def list_pools(creds: Creds, door: DoorDep) -> dict:
    door.allow(door.who(creds, "pool.read", "/"), "pool.read", "/")
    from peloton.model.pool import pool_tree

    return pool_tree(door.store.list_pools())


@router.get("/v1/respools/{path:path}", summary="A pool's shares and its usage now")
def get_pool(path: str, creds: Creds, door: DoorDep) -> dict:
    path = "/" + path.strip("/")
    door.allow(door.who(creds, "pool.read", path), "pool.read", path, path)
    from stages.entitle.usage import pool_view

    # admin.pool_report's, from the views the API keeps rather than two made for each request
    pools = door.store.list_pools()
    if path != "/" and path not in pools:
        raise admin.NotFound(f"no resource pool {path!r} (known pools: {', '.join(pools) or 'none'})")
    return pool_view(pools, door.entitlements(), door.hosts())[path]


@router.post("/v1/respools/{path:path}", status_code=201, summary="Create a pool (admins)")
def create_pool(path: str, body: PoolConfig, creds: Creds, door: DoorDep) -> dict:
    path = "/" + path.strip("/")
    door.allow(door.who(creds, "pool.create", path), "pool.create", path, path)
    return admin.create_pool(door.settings, door.store, path, body.config)


@router.put("/v1/respools/{path:path}", summary="Replace a pool's config (admins)")
def update_pool(path: str, body: PoolConfig, creds: Creds, door: DoorDep) -> dict:
    path = "/" + path.strip("/")
    door.allow(door.who(creds, "pool.update", path), "pool.update", path, path)
    return admin.update_pool(door.settings, door.store, path, body.config, body.force)


@router.delete("/v1/respools/{path:path}", summary="Delete a leaf pool with no job (admins)")
def delete_pool(path: str, creds: Creds, door: DoorDep) -> dict:
    path = "/" + path.strip("/")
    door.allow(door.who(creds, "pool.delete", path), "pool.delete", path, path)
    admin.delete_pool(door.settings, door.store, path)
    return {"deleted": path}
