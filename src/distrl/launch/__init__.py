"""Launch layer: topology discovery and process-group set-up; the only code aware of launchers.

Nothing is imported here: a launcher's driver (Ray mode's) imports only what it uses."""
