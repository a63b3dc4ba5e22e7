"""The accounts a host's tasks run as when no per-job uid is given: the agent's default task user
(PELOTON_TASK_USER) and the job's own command.user where the host allows it (PELOTON_TASK_USERS)."""

from __future__ import annotations

import os
import pwd

from peloton.model.users import allowed_names


def task_user(name: str) -> pwd.struct_passwd | None:
    """The account tasks run as (a pwd entry), or None to run them as this process's own user.

    Only root can switch users: a driver running as root runs tasks as `name` (PELOTON_TASK_USER,
    `nobody` by default), and as root only when told so (`root`). A driver not running as root
    runs them as itself, whatever `name` says. An unknown name is an error (ValueError), said at
    start rather than at the first task."""
    if os.geteuid() != 0 or not name or name == "root":
        return None
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise ValueError(f"PELOTON_TASK_USER={name!r}: no such user on this machine") from None


class UserPolicy:
    """Which accounts a job's own command.user may name on this host (PELOTON_TASK_USERS):
    names separated by commas, or `*` for any account of the machine but root. Root only when
    listed by name. Empty: none but the account tasks run as anyway (PELOTON_TASK_USER)."""

    def __init__(self, allowed: str, default: str = "") -> None:
        self.setting = allowed
        self.names, self.any = allowed_names(allowed, default)

    def account(self, name: str) -> pwd.struct_passwd | None:
        """The pwd entry to run a task that names `name` as (None: as this process), or a
        ValueError saying why it may not run as that user here."""
        if name not in self.names and (not self.any or name == "root"):
            raise ValueError(f"command.user {name!r} is not allowed on this host (PELOTON_TASK_USERS="
                             f"{self.setting!r})")
        if os.geteuid() != 0:
            if name == pwd.getpwuid(os.geteuid()).pw_name:
                return None
            raise ValueError(f"command.user {name!r}: the agent runs as {pwd.getpwuid(os.geteuid()).pw_name!r}, "
                             f"not root, and cannot switch users")
        if name == "root":
            return None
        try:
            return pwd.getpwnam(name)
        except KeyError:
            raise ValueError(f"command.user {name!r}: no such user on this host") from None

