"""The TypeScript kernel: each cell is transpiled with the typescript
package's transpileModule, then run like JavaScript; see driver.js."""

from ipykernel.kernelapp import IPKernelApp

from ._node import NodeKernel


class TypeScriptKernel(NodeKernel):
    implementation = "cube-typescript"
    mode = "typescript"
    language = "typescript"
    language_info = {
        "name": "typescript",
        "mimetype": "text/x-typescript",
        "file_extension": ".ts",
        "codemirror_mode": "typescript",
    }
    banner = "TypeScript kernel (Cube, node)"


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=TypeScriptKernel)
