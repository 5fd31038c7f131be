// Command cubemastercli is the operator CLI of a Cube deployment.
package main

import (
	"os"

	"cube/internal/cli"
)

func main() {
	if err := cli.Root().Execute(); err != nil {
		os.Exit(1)
	}
}
