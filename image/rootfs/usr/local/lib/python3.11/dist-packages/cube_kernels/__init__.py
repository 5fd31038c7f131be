"""Cube's wrapper Jupyter kernels: bash, JavaScript and TypeScript.

Each kernel is an ipykernel Kernel that drives one long-lived child process
(bash, or node running driver.js) and forwards its output as Jupyter
messages. Run one with ``python3 -m cube_kernels.<name> -f CONNECTION_FILE``.
"""
