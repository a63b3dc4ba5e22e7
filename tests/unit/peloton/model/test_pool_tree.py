"""Pool tree rules: the parent field, share > 0, create/update/delete against the tree, the dump."""

from __future__ import annotations

import pytest

from peloton.model.pool import (
    KIND_FIELDS,
    PoolConfigError,
    delete_problems,
    parse_pool_config,
    pool_tree,
    same_pool,
    tree_problems,
)


def pool(path: str, cpu: tuple[float, float] = (0, 100), mem: tuple[float, float] = (0, 1000),
         name: str | None = None) -> dict:
    """A parsed pool record with the given (reservation, limit) for cpu and memory."""
    resources = "".join(
        f"- {{kind: {kind}, reservation: {r}, limit: {lim}}}\n" for kind, (r, lim) in (("cpu", cpu), ("memory", mem))
    )
    text = f"resources:\n{resources}" + (f"name: {name}\n" if name else "")
    return parse_pool_config(text, path)


def tree(*configs: dict) -> dict[str, dict]:
    return {c["path"]: c for c in configs}


def errors_of(text: str, path: str = "/a/b") -> list[str]:
    with pytest.raises(PoolConfigError) as exc:
        parse_pool_config(text, path)
    return exc.value.errors


# ---- parsing: Peloton's files, camelCase, parent, name, share ------------------------------

EXAMPLE_RECORDS = {
    "default_respool.yaml": {
        "name": "DefaultResPool", "owning_team": "team6", "ldap_groups": ["money", "team6", "otto"],
        "resources": [
            {"kind": "cpu", "reservation": 12.0, "limit": 12.0, "share": 1.0, "static": False},
            {"kind": "memory", "reservation": 6144.0, "limit": 6144.0, "share": 1.0, "static": False},
            {"kind": "disk", "reservation": 10240.0, "limit": 20480.0, "share": 1.0, "static": False},
            {"kind": "gpu", "reservation": 0.0, "limit": 0.0, "share": 1.0, "static": False},
        ],
    },
    "helloworld_pool.yaml": {
        "name": "HelloWorldPool", "owning_team": "MyTeam", "ldap_groups": ["MyGroup"],
        "resources": [  # cpu gives no share: Peloton's default 1
            {"kind": "cpu", "reservation": 4.0, "limit": 8.0, "share": 1.0, "static": False},
            {"kind": "memory", "reservation": 2048.0, "limit": 4096.0, "share": 1.0, "static": False},
            {"kind": "disk", "reservation": 2048.0, "limit": 4096.0, "share": 1.0, "static": False},
            {"kind": "gpu", "reservation": 0.0, "limit": 0.0, "share": 1.0, "static": False},
        ],
    },
}


@pytest.mark.parametrize("name", sorted(EXAMPLE_RECORDS))
def test_pelotons_example_pool_files_parse_to_the_same_record_as_before(peloton_examples, name: str) -> None:
    # skipped, with the reason, when Peloton's example files are not beside the repository
    config = parse_pool_config((peloton_examples / name).read_text(), "/team/p")
    assert config == {
        "path": "/team/p", "parent": "/team", "policy": 1, "controller_limit_pct": 10.0,
        "slack_limit_pct": 30.0, "deleted": False, "updated_ms": 0, **EXAMPLE_RECORDS[name],
    }


def test_camel_case_keys_parse_the_same_as_lowercase_keys() -> None:
    lower = ("name: p\nowningteam: t\nparent: /a\n"
             "resources:\n- {kind: cpu, reservation: 1, limit: 2, share: 3, type: 2}\n"
             "controllerlimit: {maxpercent: 10}\nslacklimit: {maxpercent: 30}\npolicy: 1\n")
    camel = ("Name: p\nowningTeam: t\nParent: /a\n"
             "Resources:\n- {Kind: cpu, Reservation: 1, Limit: 2, Share: 3, Type: 2}\n"
             "controllerLimit: {maxPercent: 10}\nslackLimit: {maxPercent: 30}\nPolicy: 1\n")
    assert parse_pool_config(camel, "/a/p") == parse_pool_config(lower, "/a/p")
    config = parse_pool_config(camel, "/a/p")
    assert (config["owning_team"], config["controller_limit_pct"], config["slack_limit_pct"]) == ("t", 10.0, 30.0)
    assert config["resources"][0] == {"kind": "cpu", "reservation": 1.0, "limit": 2.0, "share": 3.0, "static": True}


@pytest.mark.parametrize(
    "path, parent",
    [("/a/b", "/a"), ("/a/b", "/a/"), ("/a/b", "a"), ("/x/a/b", "a"), ("/x/a/b", "/x/a"),
     ("/b", "/"), ("/b", "root"), ("/root/b", "root")],
)
def test_a_parent_field_that_agrees_with_the_path_is_accepted(path: str, parent: str) -> None:
    config = parse_pool_config(f"parent: {parent}\n", path)
    assert config["parent"] == (path.rsplit("/", 1)[0] or "/")


@pytest.mark.parametrize("written", ["{value: root}", "{Value: root}", "\n  value: root"])
def test_a_parent_written_as_pelotons_api_writes_it_is_read_as_its_value(written: str) -> None:
    assert parse_pool_config(f"parent: {written}\n", "/b")["parent"] == "/"
    assert errors_of(f"parent: {written.replace('root', 'x')}\n", "/b") == [
        "parent: 'x' is not the parent of '/b', whose parent is '/'"]
    assert errors_of("parent: {value: root, other: 1}\n", "/b")[0].startswith("parent: expected")


@pytest.mark.parametrize(
    "path, parent, expected",
    [
        ("/a/b", "/c", "parent: '/c' is not the parent of '/a/b', whose parent is '/a'"),
        ("/a/b", "c", "parent: 'c' is not the parent of '/a/b', whose parent is '/a'"),
        ("/a/b", "root", "parent: 'root' is not the parent of '/a/b', whose parent is '/a'"),
        ("/a/b", "/", "parent: '/' is not the parent of '/a/b', whose parent is '/a'"),
        ("/x/a/b", "/a", "parent: '/a' is not the parent of '/x/a/b', whose parent is '/x/a'"),
        ("/b", "b", "parent: 'b' is not the parent of '/b', whose parent is '/'"),
        ("/b", "/a", "parent: '/a' is not the parent of '/b', whose parent is '/'"),
    ],
)
def test_a_parent_field_that_disagrees_with_the_path_names_both(path: str, parent: str, expected: str) -> None:
    assert errors_of(f"parent: {parent}\n", path) == [expected]


def test_a_parent_field_must_be_text() -> None:
    assert errors_of("parent: [a]\n") == ["parent: expected a string, got a list"]


def test_a_name_unlike_the_last_path_component_is_a_display_name_and_accepted() -> None:
    assert parse_pool_config("name: Something Else\n", "/a/b")["name"] == "Something Else"
    assert parse_pool_config("{}\n", "/a/b")["name"] == "b"


@pytest.mark.parametrize("share, shown", [("0", "0.0"), ("0.0", "0.0"), ("-1", "-1.0")])
def test_a_share_must_be_above_zero(share: str, shown: str) -> None:
    text = f"resources:\n- {{kind: cpu, limit: 1}}\n- {{kind: memory, share: {share}}}\n"
    assert errors_of(text) == [f"resources[1].share: must be > 0, got {shown}"]


def test_a_missing_share_is_one_and_a_small_share_is_kept() -> None:
    config = parse_pool_config("resources: [{kind: cpu, limit: 1}, {kind: gpu, share: 0.01}]\n", "/p")
    shares = {r["kind"]: r["share"] for r in config["resources"]}
    assert shares == {"cpu": 1.0, "memory": 1.0, "disk": 1.0, "gpu": 0.01}


# ---- same_pool -----------------------------------------------------------------------------

def test_same_pool_ignores_bookkeeping_but_not_configuration() -> None:
    a = pool("/a", cpu=(1, 2))
    assert same_pool(a, {**a, "updated_ms": 99, "deleted": True})
    assert not same_pool(a, pool("/a", cpu=(1, 3)))
    assert not same_pool(a, {**a, "name": "other"})


# ---- tree_problems: create -----------------------------------------------------------------

def test_a_valid_create_and_a_valid_update_have_no_problems() -> None:
    pools = tree(pool("/a", cpu=(12, 20)), pool("/a/x", cpu=(8, 20)))
    assert tree_problems(pools, pool("/a/y", cpu=(4, 20))) == []
    assert tree_problems(pools, pool("/b", cpu=(500, 900))) == []  # under root: capacity unknown here
    assert tree_problems(pools, pool("/a/x", cpu=(10, 15)), update=True) == []
    assert tree_problems(pools, pool("/a", cpu=(8, 20)), update=True) == []


def test_the_root_pool_cannot_be_created_or_replaced() -> None:
    root = {**pool("/a"), "path": "/", "parent": "/"}
    assert tree_problems({}, root) == ["path: the root pool / cannot be created or replaced"]
    assert tree_problems({}, root, update=True) == ["path: the root pool / cannot be created or replaced"]


def test_a_create_of_an_existing_path_is_refused() -> None:
    pools = tree(pool("/a"))
    assert tree_problems(pools, pool("/a", cpu=(1, 2))) == ["path: /a already exists"]
    assert tree_problems(pools, pool("/a")) == ["path: /a already exists"]  # same config: the caller's call


def test_a_create_under_a_missing_parent_is_refused() -> None:
    assert tree_problems(tree(pool("/a")), pool("/b/x")) == ["parent: /b does not exist (create it first)"]


def test_a_child_cannot_be_created_under_a_leaf_pool_with_jobs() -> None:
    pools = tree(pool("/a", cpu=(10, 100)))
    expected = ["parent: /a is a leaf pool with jobs; a pool with jobs cannot get children"]
    assert tree_problems(pools, pool("/a/x"), leaf_has_jobs=True) == expected
    assert tree_problems(pools, pool("/a/x"), leaf_has_jobs=False) == []


def test_a_parent_that_already_has_children_is_no_leaf_so_its_jobs_flag_does_not_matter() -> None:
    pools = tree(pool("/a", cpu=(10, 100)), pool("/a/x"))
    assert tree_problems(pools, pool("/a/y"), leaf_has_jobs=True) == []


def test_a_childs_limit_may_not_exceed_its_parents_per_kind() -> None:
    pools = tree(pool("/a", cpu=(0, 8), mem=(0, 100)))
    assert tree_problems(pools, pool("/a/x", cpu=(0, 10), mem=(0, 200))) == [
        "cpu limit: /a/x limit 10 is above the limit 8 of its parent /a",
        "memory limit: /a/x limit 200 is above the limit 100 of its parent /a",
    ]
    assert tree_problems(pools, pool("/a/x", cpu=(0, 8), mem=(0, 100))) == []  # equal is fine


def test_siblings_reservations_together_may_not_exceed_the_parents() -> None:
    pools = tree(pool("/a", cpu=(12, 100)), pool("/a/x", cpu=(8, 100)), pool("/a/z"))
    assert tree_problems(pools, pool("/a/y", cpu=(6, 100))) == [
        "cpu reservation: children of /a reserve 14 of its 12 (/a/x 8, /a/y 6)"
    ]
    assert tree_problems(pools, pool("/a/y", cpu=(4, 100))) == []  # exactly full


def test_reservations_that_fill_the_parent_exactly_are_not_refused_for_float_rounding() -> None:
    pools = tree(pool("/a", cpu=(0.3, 1)), pool("/a/x", cpu=(0.1, 1)))
    assert tree_problems(pools, pool("/a/y", cpu=(0.2, 1))) == []
    assert tree_problems(pools, pool("/a/y", cpu=(0.21, 1))) == [
        "cpu reservation: children of /a reserve 0.31 of its 0.3 (/a/x 0.1, /a/y 0.21)"
    ]


def test_top_level_pools_are_not_checked_against_the_unknown_cluster_capacity() -> None:
    pools = tree(pool("/a", cpu=(10**6, 10**6)))
    assert tree_problems(pools, pool("/b", cpu=(10**6, 10**7))) == []


def test_one_file_makes_many_pools_the_path_names_each() -> None:
    pools = tree(pool("/a"), pool("/a/x", name="Team"))
    assert tree_problems(pools, pool("/a/y", name="Team")) == []  # the display name is only shown
    assert tree_problems(pools, pool("/a/x", name="Other")) == ["path: /a/x already exists"]

def test_a_change_whose_parent_disagrees_with_its_path_is_refused() -> None:
    pools = tree(pool("/a"), pool("/c"))
    assert tree_problems(pools, {**pool("/a/x"), "parent": "/c"}) == [
        "parent: /c is not the parent of /a/x, whose parent is /a"
    ]


# ---- tree_problems: update -----------------------------------------------------------------

def test_an_update_of_a_missing_pool_is_refused() -> None:
    assert tree_problems(tree(pool("/a")), pool("/b"), update=True) == ["path: no pool /b to update"]


def test_an_update_never_changes_the_parent() -> None:
    pools = tree(pool("/a"), pool("/c"), {**pool("/a/x"), "parent": "/c"})  # a stored record gone astray
    assert tree_problems(pools, pool("/a/x"), update=True) == [
        "parent: the parent of /a/x never changes (stored /c, given /a)"
    ]


def test_an_update_checks_the_new_values_against_the_parent_and_siblings() -> None:
    pools = tree(pool("/a", cpu=(12, 20)), pool("/a/x", cpu=(8, 20)), pool("/a/y", cpu=(4, 20)))
    # the stored /a/y (4) is replaced by its new value (6), not counted beside it
    assert tree_problems(pools, pool("/a/y", cpu=(6, 30)), update=True) == [
        "cpu limit: /a/y limit 30 is above the limit 20 of its parent /a",
        "cpu reservation: children of /a reserve 14 of its 12 (/a/x 8, /a/y 6)",
    ]


def test_an_update_may_not_leave_a_childs_limit_above_the_new_limit() -> None:
    pools = tree(pool("/a", cpu=(0, 20)), pool("/a/x", cpu=(0, 15)), pool("/a/y", cpu=(0, 5)))
    assert tree_problems(pools, pool("/a", cpu=(0, 10)), update=True) == [
        "cpu limit: /a/x limit 15 is above the limit 10 of its parent /a"
    ]


def test_an_update_may_not_leave_the_childrens_reservations_above_the_new_reservation() -> None:
    pools = tree(pool("/a", cpu=(12, 20)), pool("/a/x", cpu=(8, 20)), pool("/a/y", cpu=(4, 20)))
    assert tree_problems(pools, pool("/a", cpu=(10, 20)), update=True) == [
        "cpu reservation: children of /a reserve 12 of its 10 (/a/x 8, /a/y 4)"
    ]


def test_an_update_reports_every_problem_at_once() -> None:
    pools = tree(pool("/a", cpu=(10, 10), mem=(100, 100)), pool("/a/x", cpu=(5, 10), mem=(50, 100)),
                 pool("/a/x/k", cpu=(5, 10), mem=(50, 100)))
    problems = tree_problems(pools, pool("/a/x", cpu=(11, 11), mem=(40, 40)), update=True)
    assert problems == [
        "cpu limit: /a/x limit 11 is above the limit 10 of its parent /a",
        "cpu reservation: children of /a reserve 11 of its 10 (/a/x 11)",
        "memory limit: /a/x/k limit 100 is above the limit 40 of its parent /a/x",
        "memory reservation: children of /a/x reserve 50 of its 40 (/a/x/k 50)",
    ]


# ---- delete_problems -----------------------------------------------------------------------

def test_the_root_pool_cannot_be_deleted() -> None:
    assert delete_problems({}, "/", has_jobs=False) == ["path: the root pool / cannot be deleted"]


def test_an_unknown_pool_cannot_be_deleted() -> None:
    assert delete_problems(tree(pool("/a")), "/b", has_jobs=False) == ["path: unknown resource pool /b"]


def test_a_pool_with_children_cannot_be_deleted() -> None:
    pools = tree(pool("/a"), pool("/a/y"), pool("/a/x"), pool("/a/x/k"))
    assert delete_problems(pools, "/a", has_jobs=False) == [
        "children: /a has child pools (/a/x, /a/y); delete them first"
    ]
    assert delete_problems(pools, "/a/x/k", has_jobs=False) == []


def test_a_pool_with_jobs_that_are_not_terminal_cannot_be_deleted() -> None:
    assert delete_problems(tree(pool("/a")), "/a", has_jobs=True) == [
        "jobs: /a has jobs that are not terminal; kill them or let them finish first"
    ]


# ---- pool_tree -----------------------------------------------------------------------------

def test_the_pool_tree_nests_children_sorted_by_path() -> None:
    pools = tree(pool("/b"), pool("/a/y"), pool("/a", cpu=(2, 4), name="Aa"), pool("/a/x"), pool("/a/x/k"))
    dump = pool_tree(pools)
    assert dump["path"] == "/" and set(dump) == {"path", "children"}

    def shape(node: dict) -> list:
        return [(c["path"], shape(c)) for c in node["children"]]

    assert shape(dump) == [("/a", [("/a/x", [("/a/x/k", [])]), ("/a/y", [])]), ("/b", [])]
    a = dump["children"][0]
    assert a == {
        "path": "/a", "name": "Aa", "controller_limit_pct": 100.0, "slack_limit_pct": 20.0,
        "resources": {
            "cpu": {"reservation": 2.0, "limit": 4.0, "share": 1.0, "static": False},
            "memory": {"reservation": 0.0, "limit": 1000.0, "share": 1.0, "static": False},
            "disk": {"reservation": 0.0, "limit": 0.0, "share": 1.0, "static": False},
            "gpu": {"reservation": 0.0, "limit": 0.0, "share": 1.0, "static": False},
        },
        "children": a["children"],
    }
    assert list(a["resources"]) == list(KIND_FIELDS)


def test_an_empty_pool_tree_is_the_root_alone() -> None:
    assert pool_tree({}) == {"path": "/", "children": []}


def test_a_pool_whose_parent_is_missing_hangs_under_its_nearest_ancestor_rather_than_vanishing() -> None:
    dump = pool_tree(tree(pool("/a"), pool("/a/x/k")))
    assert [c["path"] for c in dump["children"][0]["children"]] == ["/a/x/k"]
