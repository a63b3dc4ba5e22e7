"""Peloton's operator services that have nothing to act on here, each not served with why:
v1alpha's AdminService (lockdown) and the VolumeService of v0 and v1alpha (persistent volumes).
Kept together as the services the server answers UNIMPLEMENTED as a whole."""

from __future__ import annotations

from pelotonctl.api.rpc.catalog import not_served

# Checked against the code: nothing here can be locked (no lockdown, no read-only or maintenance
# switch in the API or the stages), and peloton.model.taskconfig notes a task's `volume` as not
# kept rather than refusing it.
LOCKDOWN = ("there is no lockdown here: nothing in the API or the stages has a switch that makes it refuse work while "
            "it runs, as Peloton's lockable components (GoalStateEngine, Read, Write, Kill, Launch) do")
VOLUMES = ("persistent volumes are not kept here: a task config's `volume` is accepted with a notice that it is not "
           "kept (a task's sandbox is its only disk), so no job has a volume to list, get or delete")

not_served("peloton.api.v1alpha.admin.svc.AdminService", LOCKDOWN)
not_served("peloton.api.v0.volume.svc.VolumeService", VOLUMES)
not_served("peloton.api.v1alpha.volume.svc.VolumeService", VOLUMES)
