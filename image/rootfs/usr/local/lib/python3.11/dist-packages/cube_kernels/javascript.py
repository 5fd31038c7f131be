"""The JavaScript kernel (node); see _node.py and driver.js."""

from ipykernel.kernelapp import IPKernelApp

from ._node import NodeKernel


class JavaScriptKernel(NodeKernel):
    implementation = "cube-javascript"
    mode = "javascript"
    language = "javascript"
    language_info = {
        "name": "javascript",
        "mimetype": "application/javascript",
        "file_extension": ".js",
        "codemirror_mode": "javascript",
    }
    banner = "JavaScript kernel (Cube, node)"


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=JavaScriptKernel)
