"""Peloton's operator service that has nothing to act on here, not served with why: v1alpha's
AdminService (lockdown), answered UNIMPLEMENTED as a whole."""

from __future__ import annotations

from pelotonctl.api.rpc.catalog import not_served

# Checked against the code: nothing here can be locked (no lockdown, no read-only or maintenance
# switch in the API or the stages).
LOCKDOWN = ("there is no lockdown here: nothing in the API or the stages has a switch that makes it refuse work while "
            "it runs, as Peloton's lockable components (GoalStateEngine, Read, Write, Kill, Launch) do")

not_served("peloton.api.v1alpha.admin.svc.AdminService", LOCKDOWN)
