"""How nodetune talks to Ansible: its environment, inventories, vault, -e, the playbook runner."""
