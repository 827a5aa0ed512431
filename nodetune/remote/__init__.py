"""Running commands on nodes over SSH (paramiko), as Ansible's ssh would reach them."""
