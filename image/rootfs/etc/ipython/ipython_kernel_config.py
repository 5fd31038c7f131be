# System-wide configuration of IPython kernels in Cube's default template.
# IPython reads it from /etc/ipython (one of its system configuration
# directories) before any profile's own ipython_kernel_config.py.
c = get_config()  # noqa: F821

# cube_display (/usr/local/lib/python3.11/dist-packages/cube_display) adds
# the e2b/chart and e2b/data outputs of matplotlib figures and pandas
# DataFrames, and PNG results for PIL images that are shown or saved.
# Loading it imports none of matplotlib, pandas or PIL.
c.InteractiveShellApp.extensions = ["cube_display"]
