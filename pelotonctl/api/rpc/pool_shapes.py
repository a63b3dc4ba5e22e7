"""Resource pools for v0's ResourceManager and v1alpha's ResourcePoolService alike: a stored pool
(peloton.model.pool's record) as Peloton's ResourcePoolConfig and ResourcePoolInfo, a config
message as the respool YAML the HTTP API's routes take, and the pool operations through those
routes, raising what both services answer (v0 in its error fields, v1alpha as status codes).

v1alpha's respool messages are v0's with their fields renamed, numbered and typed alike
(test_respools checks it), so the shapes are built once, in v0's messages, and `recast` reads
one as the other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import grpc
import yaml
from google.protobuf import json_format
from google.protobuf.message import Message

from peloton.api.v0.respool import respool_pb2
from peloton.model.pool import KIND_FIELDS
from peloton.model.resources import ZERO, Resources
from pelotonctl import admin
from pelotonctl.api.routes import respools
from pelotonctl.api.rpc import convert
from pelotonctl.api.rpc.calls import Call, Failed
from stages.entitle.usage import leaves, pool_view, up_to_root, usage_from_record

M = TypeVar("M", bound=Message)

KINDS = tuple(KIND_FIELDS)  # Peloton's kind names: cpu, memory, disk, gpu
ROOT = "/"


class NotLeaf(Failed):
    """A pool with children is not deleted (Peloton's ResourcePoolIsNotLeaf)."""

    def __init__(self, detail: str) -> None:
        super().__init__(grpc.StatusCode.INVALID_ARGUMENT, detail)


class Busy(Failed):
    """A pool with jobs not ended is not deleted (Peloton's ResourcePoolIsBusy: Peloton asks for
    no allocation or demand left; here any job of the pool not ended keeps it, running or waiting)."""

    def __init__(self, detail: str) -> None:
        super().__init__(grpc.StatusCode.FAILED_PRECONDITION, detail)


class InvalidPath(Failed):
    def __init__(self, detail: str) -> None:
        super().__init__(grpc.StatusCode.INVALID_ARGUMENT, detail)


def recast(message: Message, cls: type[M]) -> M:
    """The message read as `cls`, a message of the other API version with the same wire form."""
    return cls.FromString(message.SerializeToString())


# ---- a config message in -----------------------------------------------------------------------

def config_yaml(config: respool_pb2.ResourcePoolConfig) -> str:
    """The config as a respool YAML. Enums go as their numbers, as Peloton's respool files write
    them (policy: 1, type: 2) and as the pool parser reads them; the change log is the store's
    own bookkeeping and is left out."""
    doc = json_format.MessageToDict(config, use_integers_for_enums=True)
    doc.pop("changeLog", None)
    return yaml.safe_dump(doc, sort_keys=False)


def created_path(config: respool_pb2.ResourcePoolConfig) -> str:
    """Where a new pool goes, as Peloton derives it: its parent's path, then its name. A config
    without a parent goes under the root, as `respool create /name` does."""
    name = config.name.strip()
    if not name:
        raise admin.UserError("name: a new pool needs one; its path is its parent's path and its name")
    if "/" in name:
        raise admin.UserError(f"name: {name!r} has a '/'; a pool's name is the last part of its path, and its "
                              f"parent is given apart (parent)")
    return convert.pool_path(config.parent.value).rstrip("/") + "/" + name


# ---- stored pools out --------------------------------------------------------------------------

@dataclass(frozen=True)
class Tree:
    """The live pools, pool_view's figures of each (the root "/" too) and each pool's slack
    allocation (revocable runs), at one moment."""

    pools: dict[str, dict]
    view: dict[str, dict]
    slack: dict[str, Resources]

    def children(self, path: str) -> list[str]:
        return sorted(p for p, c in self.pools.items() if c["parent"] == path)

    def paths(self) -> list[str]:
        return [ROOT, *sorted(self.pools)]


def tree(call: Call) -> Tree:
    """What `respool get` shows, for every pool: from the store and the API's views of the
    entitlements and host-state topics."""
    pools = {p: c for p, c in call.store.list_pools().items() if not c.get("deleted")}
    published = call.door.entitlements()
    view = pool_view(pools, published, call.door.hosts())
    return Tree(pools, view, _slack(pools, published))


def _slack(pools: dict[str, dict], published: dict[str, dict]) -> dict[str, Resources]:
    """Each pool's slack allocation: its leaves' as published, summed up the tree as pool_view
    sums allocation (pool_view does not keep it apart)."""
    slack: dict[str, Resources] = {}
    for leaf in leaves(pools):
        if leaf not in published:
            continue
        held = usage_from_record(published[leaf]).slack_allocation or ZERO
        for node in up_to_root(pools, leaf):
            slack[node] = slack.get(node, ZERO) + held
    return slack


def pool_config(tree: Tree, path: str, out: respool_pb2.ResourcePoolConfig) -> respool_pb2.ResourcePoolConfig:
    """A stored pool as Peloton's config. The root's is the cluster's: its reservation and limit
    the UP hosts' capacity. A description is not stored here, so none is given back."""
    config = tree.pools.get(path)
    figures = tree.view[path]
    out.policy = respool_pb2.PriorityFIFO
    if config is None:
        out.name = convert.ROOT_POOL_ID
        for kind in KINDS:
            out.resources.add(kind=kind, reservation=figures["reservation"][kind], limit=figures["limit"][kind],
                              share=figures["share"][kind], type=respool_pb2.ELASTIC)
        return out
    out.name = config["name"]
    out.owningTeam = config.get("owning_team", "")
    out.ldapGroups.extend(config.get("ldap_groups", []))
    for r in config["resources"]:
        out.resources.add(kind=r["kind"], reservation=r["reservation"], limit=r["limit"], share=r["share"],
                          type=respool_pb2.STATIC if r.get("static") else respool_pb2.ELASTIC)
    out.parent.value = convert.pool_id(config["parent"])
    out.controllerLimit.maxPercent = config.get("controller_limit_pct", 100.0)
    out.slackLimit.maxPercent = config.get("slack_limit_pct", 20.0)
    return out


def pool_info(tree: Tree, path: str, out: respool_pb2.ResourcePoolInfo | None = None) -> respool_pb2.ResourcePoolInfo:
    """A pool with its id (its path; the root's is "root"), parent, children and what it holds
    now per kind: its allocation, and of that the slack (revocable) part."""
    out = out if out is not None else respool_pb2.ResourcePoolInfo()
    out.id.value = convert.pool_id(path)
    out.path.value = path
    pool_config(tree, path, out.config)
    if path != ROOT:
        out.parent.value = convert.pool_id(tree.pools[path]["parent"])
    for child in tree.children(path):
        out.children.add(value=convert.pool_id(child))
    slack = tree.slack.get(path, ZERO)
    for kind in KINDS:
        out.usage.add(kind=kind, allocation=tree.view[path]["allocation"][kind],
                      slack=getattr(slack, KIND_FIELDS[kind]))
    return out


# ---- the operations, through the HTTP API's routes ---------------------------------------------

def read(call: Call, pool_id: str) -> tuple[str, Tree]:
    """The pool's path and the tree, once the caller may read it; admin.NotFound if there is no
    such pool. An id not given is the root's, as in Peloton."""
    path = convert.pool_path(pool_id)
    respools.get_pool(path, call.creds, call.door)
    now = tree(call)
    if path not in now.view:  # deleted since the route read it
        raise admin.NotFound(f"no resource pool {path!r}")
    return path, now


def read_all(call: Call) -> Tree:
    """The whole tree; any known user may read it (peloton.auth.permissions: pool.read)."""
    respools.list_pools(call.creds, call.door)
    return tree(call)


def lookup(call: Call, path: str) -> str:
    """A pool's id by its path, with Peloton's checks of the path (InvalidPath)."""
    if not path:
        raise InvalidPath("path cannot be empty")
    if not path.startswith("/"):
        raise InvalidPath(f"path {path!r} should begin with /")
    respools.get_pool(path, call.creds, call.door)
    return convert.pool_id("/" + path.strip("/"))


def create(call: Call, path: str, config: respool_pb2.ResourcePoolConfig) -> str:
    """Store a new pool at `path`; a pool already there (with another config) is
    admin.AlreadyExists, a config the tree refuses admin.UserError with every reason. A create
    of the same config again is done already, and answered so."""
    try:
        respools.create_pool(path, respools.PoolConfig(config=config_yaml(config), force=False), call.creds, call.door)
    except admin.UserError as exc:
        if not isinstance(exc, admin.AlreadyExists) and call.store.get_pool(path) is not None:
            raise admin.AlreadyExists(str(exc)) from None
        raise
    return path


def update(call: Call, path: str, config: respool_pb2.ResourcePoolConfig, force: bool) -> None:
    respools.update_pool(path, respools.PoolConfig(config=config_yaml(config), force=force), call.creds, call.door)


def delete(call: Call, path: str) -> None:
    """Delete an empty leaf pool: NotLeaf for a pool with children (Peloton asks that first),
    Busy for one with jobs, admin.NotFound for none, admin.UserError for the root."""
    path = convert.pool_path(path)
    try:
        respools.delete_pool(path, call.creds, call.door)
    except admin.UserError as exc:
        if isinstance(exc, admin.NotFound) or path == ROOT:
            raise
        pools = call.store.list_pools()
        if any(c["parent"] == path and not c.get("deleted") for c in pools.values()):
            raise NotLeaf(str(exc)) from None
        raise Busy(str(exc)) from None

