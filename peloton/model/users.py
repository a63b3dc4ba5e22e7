"""Which accounts a job's command.user may name: the cluster's PELOTON_TASK_USERS (names
separated by commas, or `*` for any account but root; root only by name) and the account runs
go under anyway (PELOTON_TASK_USER). Checked at submission (job validate, the API, the job
manager) and again by each agent, which runs a job under a uid of its own unless its command.user
is allowed there."""

from __future__ import annotations


def allowed_names(allowed: str, default: str = "") -> tuple[set[str], bool]:
    """(the names allowed, whether `*` allows any account but root)."""
    names = {n.strip() for n in allowed.split(",") if n.strip()}
    return (names - {"*"}) | ({default} if default else set()), "*" in names


def user_problem(name: str, allowed: str, default: str = "") -> str | None:
    """Why a job may not name `name` as its command.user in this cluster, or None."""
    names, anyone = allowed_names(allowed, default)
    if name in names or (anyone and name != "root"):
        return None
    how = "root only when named there" if name == "root" else "name it there, or leave command.user out"
    return (f"{name!r} is not allowed in this cluster (PELOTON_TASK_USERS={allowed!r}; {how}): a job's tasks "
            f"run as a uid of their own on each host unless the cluster allows the account the job names")
