"""Resource pools: the tree, one pool's shares and usage, and the admins' create, update and
delete. A path is normalised to one leading slash and no trailing one before anyone is asked."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from pelotonctl import admin
from pelotonctl.api.door import DoorDep
from pelotonctl.api.identity import Creds

router = APIRouter(tags=["respools"])


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
    return admin.pool_report(door.settings, door.store, path)


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
