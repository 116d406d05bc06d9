"""Fleets through Ansible: an inventory's hosts measured by ansible-runner (docs/fleet.md)."""
